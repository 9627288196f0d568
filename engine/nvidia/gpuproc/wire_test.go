package gpuproc

import (
	"bytes"
	"errors"
	"math"
	"net"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/gtt"
)

// sampleMsg sets every field, so that each layout encodes something.
func sampleMsg() Msg {
	return Msg{
		Dst: []gtt.Extent{{Off: 0x1000, Len: 64}, {Off: 0x3000, Len: 8}}, Src: []gtt.Extent{{Off: 0x2000, Len: 72}},
		A: 7, B: 8, C: 9, X: 1 << 40, Y: 3, Words: []uint64{5, 6}, Data: []byte("payload"), Str: "scribble",
		Grid: engine.Grid{X: 2, Y: 1, Z: 1, BlockX: 32, BlockY: 1, BlockZ: 1, SharedBytes: 16},
	}
}

// sampleFrames is one frame of every kind and op the protocol has.
func sampleFrames() [][]byte {
	m := sampleMsg()
	var out [][]byte
	for op := OpOpen; op < opCount; op++ {
		m.Bulk = Span{Off: regionOf(op).Off + 4096, Len: 8192} // inside the op's connection's region
		if op == OpLanded {
			out = append(out, appendFrame(nil, KindLanded, op, &m))
			continue
		}
		out = append(out, appendFrame(nil, KindCall, op, &m), appendFrame(nil, KindReply, op, &m),
			appendFrame(nil, KindError, op, &m))
	}
	return append(out, appendFrame(nil, KindPost, OpLaunchGrid, &m))
}

// TestFrameRoundTrip: every frame decodes to the fields its layout names,
// and encodes back to the same bytes.
func TestFrameRoundTrip(t *testing.T) {
	if HeaderSize != 8 {
		t.Fatalf("HeaderSize %d", HeaderSize)
	}
	for _, f := range sampleFrames() {
		h, m, err := DecodeFrame(f)
		if err != nil {
			t.Fatalf("%s %s: %v", kindName(h.Kind), h.Op, err)
		}
		if again := appendFrame(nil, h.Kind, h.Op, &m); !bytes.Equal(again, f) {
			t.Fatalf("%s %s: re-encoded differently", kindName(h.Kind), h.Op)
		}
	}
	h, m, err := DecodeFrame(appendFrame(nil, KindCall, OpLaunchGrid, ptr(sampleMsg())))
	if err != nil || h.Op != OpLaunchGrid || m.C != 9 || m.Grid != sampleMsg().Grid || string(m.Data) != "payload" {
		t.Fatalf("launch-grid decoded as %+v, %+v, %v", h, m, err)
	}
}

// TestDecodeRefuses: malformed frames are refused with ErrMalformed, never
// a panic or an allocation of what a corrupt length announces.
func TestDecodeRefuses(t *testing.T) {
	good := appendFrame(nil, KindCall, OpWrite, ptr(sampleMsg()))
	for name, f := range map[string][]byte{
		"short header":     good[:5],
		"unknown op":       []byte{0, 0, 0, 0, byte(KindCall), 200, 0, 0},
		"op zero":          []byte{0, 0, 0, 0, byte(KindCall), 0, 0, 0},
		"unknown kind":     []byte{0, 0, 0, 0, 9, byte(OpSync), 0, 0},
		"padding":          []byte{0, 0, 0, 0, byte(KindCall), byte(OpSync), 1, 0},
		"huge payload":     []byte{0xff, 0xff, 0xff, 0x7f, byte(KindCall), byte(OpSync), 0, 0},
		"truncated":        good[:len(good)-1],
		"trailing byte":    append(append([]byte(nil), good...), 0),
		"landed request":   []byte{0, 0, 0, 0, byte(KindCall), byte(OpLanded), 0, 0},
		"landed other op":  append([]byte{16, 0, 0, 0, byte(KindLanded), byte(OpSync), 0, 0}, make([]byte, 16)...),
		"extent count":     append([]byte{8, 0, 0, 0, byte(KindCall), byte(OpFill), 0, 0}, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0),
		"data length":      append([]byte{8, 0, 0, 0, byte(KindCall), byte(OpModelWrite), 0, 0}, make([]byte, 4)...),
		"wrapping extent":  append([]byte{24, 0, 0, 0, byte(KindCall), byte(OpFill), 0, 0}, 1, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0),
		"fixed-size short": append([]byte{4, 0, 0, 0, byte(KindCall), byte(OpPlace), 0, 0}, 1, 2, 3, 4),
		// Bulk spans: only inside the op's connection's region.
		"bulk in the side region":   bulkFrame(OpWriteBulk, BulkSize/2, 4096),
		"bulk past the region":      bulkFrame(OpWriteBulk, BulkSize/2-4096, 8192),
		"bulk in the engine region": bulkFrame(OpTrackerReadBulk, 0, 4096),
		"bulk past the buffer":      bulkFrame(OpTrackerReadBulk, BulkSize-4096, 8192),
		"bulk beyond the buffer":    bulkFrame(OpTrackerReadBulk, BulkSize+4096, 0),
		"bulk wrapping":             bulkFrame(OpReadBulk, 4096, math.MaxUint64-4095),
		"bulk length short":         bulkFrame(OpWriteBulk, 0, 4096)[:HeaderSize+4+8],
	} {
		if _, _, err := DecodeFrame(f); !errors.Is(err, ErrMalformed) {
			t.Errorf("%s: %v, want ErrMalformed", name, err)
		}
	}
}

// bulkFrame is a call of op (no extents or words) naming the bulk span
// [off, +n); the header's length is the payload's.
func bulkFrame(op Op, off, n uint64) []byte {
	var m Msg
	m.Bulk = Span{Off: off, Len: n}
	return appendFrame(nil, KindCall, op, &m)
}

// FuzzDecodeFrame: any bytes either decode to a frame that encodes back
// to exactly them, or are refused with ErrMalformed; nothing panics.
func FuzzDecodeFrame(f *testing.F) {
	for _, fr := range sampleFrames() {
		f.Add(fr)
	}
	for _, fr := range [][]byte{ // bulk spans at and across the regions' edges
		bulkFrame(OpWriteBulk, BulkSize/2-4096, 4096), bulkFrame(OpWriteBulk, BulkSize/2-4096, 4097),
		bulkFrame(OpTrackerSnapshotBulk, BulkSize/2, BulkSize/2), bulkFrame(OpTrackerSnapshotBulk, BulkSize/2-1, 1),
	} {
		f.Add(fr)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, m, err := DecodeFrame(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("refused without ErrMalformed: %v", err)
			}
			return
		}
		if again := appendFrame(nil, h.Kind, h.Op, &m); !bytes.Equal(again, b) {
			t.Fatalf("%s %s decoded from %x re-encodes as %x", kindName(h.Kind), h.Op, b, again)
		}
	})
}

// TestServerAnswersMalformed: the worker's request loop answers a request
// it cannot take with an error and goes on: one before open, one whose
// payload does not decode, one on the wrong connection; then it opens and
// serves, and its comparison connection refuses what is not a comparison.
func TestServerAnswersMalformed(t *testing.T) {
	t.Setenv(nvidia.ModelEnv, "1")
	s := &server{log: zerolog.Nop(), window: make([]byte, 1<<20), bulk: make([]byte, BulkSize), ready: make(chan struct{})}
	client, worker := net.Pipe()
	defer client.Close()
	done := make(chan error, 1)
	go func() { done <- s.serve(worker, worker, connEngine) }()
	fr := newFrameReader(client)
	exchange := func(frame []byte) (Header, Msg) {
		t.Helper()
		if _, err := client.Write(frame); err != nil {
			t.Fatal(err)
		}
		h, m, err := fr.next()
		if err != nil {
			t.Fatal(err)
		}
		return h, m
	}
	badFill := []byte{8, 0, 0, 0, byte(KindCall), byte(OpFill), 0, 0, 0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0}
	for name, frame := range map[string][]byte{
		"sync before open": appendFrame(nil, KindCall, OpSync, &Msg{}),
		"undecodable fill": badFill,
		"a side call":      appendFrame(nil, KindCall, OpStats, &Msg{}),
		"bulk outside":     bulkFrame(OpWriteBulk, BulkSize/2, 4096),
	} {
		h, m := exchange(frame)
		if h.Kind != KindError || !errors.Is(remoteErrorOf(m), ErrMalformed) {
			t.Errorf("%s: answered %s %q, want an error wrapping ErrMalformed", name, kindName(h.Kind), m.Str)
		}
	}
	if h, m := exchange(appendFrame(nil, KindCall, OpOpen, &Msg{Str: "t"})); h.Kind != KindReply {
		t.Fatalf("open: %s %q", kindName(h.Kind), m.Str)
	}
	if h, m := exchange(appendFrame(nil, KindCall, OpSync, &Msg{})); h.Kind != KindReply {
		t.Fatalf("sync after open: %s %q", kindName(h.Kind), m.Str)
	}
	// After open too, a span outside the engine's region is refused and
	// changes nothing; one inside moves the bulk buffer's bytes.
	copy(s.bulk[BulkSize/2:], "side")
	copy(s.bulk[4096:], "engine")
	write := func(off uint64) []byte {
		return appendFrame(nil, KindCall, OpWriteBulk, &Msg{Dst: []gtt.Extent{{Off: 64, Len: 6}}, Bulk: Span{Off: off, Len: 6}})
	}
	if h, m := exchange(write(BulkSize / 2)); h.Kind != KindError || !errors.Is(remoteErrorOf(m), ErrMalformed) || s.window[64] != 0 {
		t.Errorf("write-bulk from the side region: %s %q, window % x", kindName(h.Kind), m.Str, s.window[64:70])
	}
	if h, m := exchange(write(4096)); h.Kind != KindReply || string(s.window[64:70]) != "engine" {
		t.Errorf("write-bulk: %s %q, window %q", kindName(h.Kind), m.Str, s.window[64:70])
	}
	// The comparison connection takes the tracker's comparisons alone:
	// a side call there is refused, a comparison reaches the tracker (none
	// is open: its own error, not the connection's).
	cc, cw := net.Pipe()
	defer cc.Close()
	go func() { _ = s.serve(cw, cw, connCmp) }()
	cfr := newFrameReader(cc)
	for _, c := range []struct {
		op        Op
		malformed bool
	}{{OpStats, true}, {OpTrackerReadBulk, true}, {OpTrackerChangedIn, false}} {
		if _, err := cc.Write(appendFrame(nil, KindCall, c.op, &Msg{B: 1})); err != nil {
			t.Fatal(err)
		}
		h, m, err := cfr.next()
		if err != nil {
			t.Fatal(err)
		}
		if h.Kind != KindError || errors.Is(remoteErrorOf(m), ErrMalformed) != c.malformed {
			t.Errorf("%s on the comparison connection: %s %q, want an error (malformed: %v)", c.op, kindName(h.Kind), m.Str, c.malformed)
		}
	}
	if h, _ := exchange(appendFrame(nil, KindCall, OpClose, &Msg{})); h.Kind != KindReply {
		t.Fatal("close refused")
	}
	if err := <-done; err != nil {
		t.Fatalf("serve after close: %v", err)
	}
}
