package orchestrator

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/mmio"
	"github.com/gmig-dev/gmig/precopy"
	"github.com/gmig-dev/gmig/vgpu"
)

// wireSamples are one of each control message, every field set.
func wireSamples() []any {
	at := time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.UTC)
	ms := func(n int) time.Time { return at.Add(time.Duration(n) * time.Millisecond) }
	return []any{
		&hello{Version: ProtocolVersion, Kind: kindMigrate, ID: "0123456789abcdef"},
		&hello{Version: ProtocolVersion, Kind: kindStream, ID: "0123456789abcdef", Index: 3},
		&Prepare{
			ID:   "0123456789abcdef",
			Name: "vm",
			VGPU: vgpu.Spec{MemSize: 64 << 20, GTTEntries: 4096, Backend: vgpu.BackendCUDA, GuestModules: true,
				Caps: mmio.DefaultCaps | abi.CapModules},
			VMKind: "qemu", VM: json.RawMessage(`{"args":["-m","1G"],"name":"vm"}`),
			Strategy: precopy.Iterative,
		},
		&ready{Incoming: "tcp:10.0.0.2:4444", Instance: "fedcba9876543210", Streams: 4},
		&ready{Error: "hostd: name in use: vm", Instance: "fedcba9876543210"},
		&gaveUp{GaveUp: "precopy: stream: section 4 (PageBatch): local error: tls: bad record MAC"},
		&decision{Commit: true},
		&decision{Reason: "VMM switchover: failed"},
		&committed{OK: true, Times: DestTimes{
			CommitReceived: ms(0), Loaded: ms(1), FrontEnd: ms(2), Recorded: ms(3), EngineRun: ms(4), Resumed: ms(5),
			ConfigWrites: 3,
		}},
		&committed{Error: "orchestrator: resuming the VM: failed"},
		&beat{OK: true, Value: 42, At: ms(6)},
		&outcome{State: outcomeResumed, Instance: "fedcba9876543210"},
	}
}

// TestWireRoundTrip sends each message and reads it back: the same value,
// and exactly its bytes consumed (a stream after it stays untouched).
func TestWireRoundTrip(t *testing.T) {
	for _, m := range wireSamples() {
		t.Run(reflect.TypeOf(m).Elem().Name(), func(t *testing.T) {
			var b bytes.Buffer
			if err := writeMsg(&b, m); err != nil {
				t.Fatal(err)
			}
			if n := binary.BigEndian.Uint32(b.Bytes()); int(n) != b.Len()-4 {
				t.Fatalf("length prefix %d, payload %d bytes", n, b.Len()-4)
			}
			b.WriteString("tail")
			got := reflect.New(reflect.TypeOf(m).Elem()).Interface()
			if err := readMsg(&b, got); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, m) {
				t.Errorf("read %+v, sent %+v", got, m)
			}
			if b.String() != "tail" {
				t.Errorf("left %q after the message, want %q", b.String(), "tail")
			}
		})
	}
}

// frame is a length prefix announcing n bytes, then body.
func frame(n uint32, body string) []byte {
	return append(binary.BigEndian.AppendUint32(nil, n), body...)
}

// TestReadMsgRefuses feeds readMsg what a broken or hostile peer sends.
func TestReadMsgRefuses(t *testing.T) {
	var syntax *json.SyntaxError
	var typ *json.UnmarshalTypeError
	for _, c := range []struct {
		name string
		in   []byte
		is   error // wrapped, or nil
		as   any   // errors.As target, or nil
		left int   // bytes readMsg must leave unread
	}{
		{name: "nothing", in: nil, is: io.EOF},
		{name: "half a length", in: []byte{0, 0}, is: io.ErrUnexpectedEOF},
		{name: "oversized", in: frame(maxMessage+1, strings.Repeat("x", 64)), is: errMessageSize, left: 64},
		{name: "huge", in: frame(1<<32-1, ""), is: errMessageSize},
		{name: "http", in: []byte("GET / HTTP/1.1\r\n\r\n"), is: errMessageSize, left: 14},
		{name: "truncated", in: frame(20, `{"version":1}`), is: io.ErrUnexpectedEOF},
		{name: "garbage", in: frame(5, "hello"), as: &syntax},
		{name: "empty", in: frame(0, ""), as: &syntax},
		{name: "wrong type", in: frame(17, `{"version":"one"}`), as: &typ},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := bytes.NewReader(c.in)
			var h hello
			err := readMsg(r, &h)
			switch {
			case err == nil:
				t.Fatalf("read %+v", h)
			case c.is != nil && !errors.Is(err, c.is):
				t.Errorf("%v, want %v", err, c.is)
			case c.as != nil && !errors.As(err, c.as):
				t.Errorf("%v, want a %T", err, c.as)
			case !strings.HasPrefix(err.Error(), "orchestrator: "):
				t.Errorf("%q does not name the package", err)
			}
			if r.Len() != c.left {
				t.Errorf("left %d bytes unread, want %d", r.Len(), c.left)
			}
		})
	}
}

// TestWriteMsgRefuses: what cannot be sent is not, not even in part.
func TestWriteMsgRefuses(t *testing.T) {
	for _, c := range []struct {
		name string
		v    any
		is   error
	}{
		{"oversized", Prepare{VM: json.RawMessage(`"` + strings.Repeat("x", maxMessage) + `"`)}, errMessageSize},
		{"not JSON", make(chan int), nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			var b bytes.Buffer
			err := writeMsg(&b, c.v)
			if err == nil || (c.is != nil && !errors.Is(err, c.is)) {
				t.Errorf("writeMsg: %v, want %v", err, c.is)
			}
			if b.Len() != 0 {
				t.Errorf("wrote %d bytes", b.Len())
			}
		})
	}
}

// FuzzReadMsg reads anything as each control message: readMsg never
// panics, refuses an oversized length before reading on, reads exactly one
// message when it succeeds, and what it decoded is stable through
// writeMsg and readMsg.
func FuzzReadMsg(f *testing.F) {
	for _, m := range wireSamples() {
		var b bytes.Buffer
		if err := writeMsg(&b, m); err != nil {
			f.Fatal(err)
		}
		f.Add(b.Bytes())
	}
	targets := []func() any{
		func() any { return new(hello) },
		func() any { return new(Prepare) },
		func() any { return new(committed) },
		func() any { return new(outcome) },
		func() any { return new(gaveUp) },
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		for _, target := range targets {
			r := bytes.NewReader(in)
			v := target()
			err := readMsg(r, v)
			if len(in) >= 4 {
				if size := binary.BigEndian.Uint32(in); size > maxMessage {
					if !errors.Is(err, errMessageSize) || r.Len() != len(in)-4 {
						t.Fatalf("length %d: %v, %d bytes read", size, err, len(in)-r.Len())
					}
					return
				}
			}
			if err != nil {
				continue
			}
			if used := len(in) - r.Len(); used != 4+int(binary.BigEndian.Uint32(in)) {
				t.Fatalf("read %d bytes of a %d-byte message", used, 4+binary.BigEndian.Uint32(in))
			}
			var once bytes.Buffer
			if err := writeMsg(&once, v); err != nil {
				if errors.Is(err, errMessageSize) { // re-encoding may escape more
					continue
				}
				t.Fatalf("%T read but not written: %v", v, err)
			}
			again := target()
			if err := readMsg(bytes.NewReader(once.Bytes()), again); err != nil {
				t.Fatalf("%T written but not read: %v", v, err)
			}
			var twice bytes.Buffer
			if err := writeMsg(&twice, again); err != nil || !bytes.Equal(once.Bytes(), twice.Bytes()) {
				t.Fatalf("%T not stable: %q then %q (%v)", v, once.Bytes(), twice.Bytes(), err)
			}
		}
	})
}
