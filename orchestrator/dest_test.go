package orchestrator

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/internal/syncbuf"
)

// logBuffer is a zerolog sink tests read.
type logBuffer struct{ syncbuf.Buffer }

// serveDest serves a Destination for h on a loopback listener until the
// end of the test.
func serveDest(t *testing.T, h Host, opts DestinationOptions) (*Destination, string) {
	t.Helper()
	l, err := TCP{}.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	d := NewDestination(h, opts)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return d, l.Addr().String()
}

// TestDestinationRefusesConnections: a connection without a valid hello,
// of an unknown kind, or carrying a stream for no migration waiting for
// one is closed unanswered, and nothing lands; a query is answered.
func TestDestinationRefusesConnections(t *testing.T) {
	for _, c := range []struct {
		name string
		send []byte
		log  string // what the destination says; "": it answers
	}{
		{"wrong version", msg(t, hello{Version: ProtocolVersion + 1, Kind: kindMigrate, ID: "m"}), "without a valid hello"},
		{"no id", msg(t, hello{Version: ProtocolVersion, Kind: kindMigrate}), "without a valid hello"},
		{"not a hello", []byte("GET / HTTP/1.1\r\n\r\n"), "without a valid hello"},
		{"unknown kind", msg(t, hello{Version: ProtocolVersion, Kind: "shell", ID: "m"}), "unknown connection kind"},
		{"stream for no migration", msg(t, hello{Version: ProtocolVersion, Kind: kindData, ID: "m"}), "a stream for no migration"},
		{"query", msg(t, hello{Version: ProtocolVersion, Kind: kindQuery, ID: "m"}), ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			var logs logBuffer
			h := &fakeHost{}
			d, addr := serveDest(t, h, DestinationOptions{Log: zerolog.New(&logs), Timeouts: testTimeouts})
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if _, err := conn.Write(c.send); err != nil {
				t.Fatal(err)
			}
			_ = conn.SetReadDeadline(time.Now().Add(guard))
			var o outcome
			err = readMsg(conn, &o)
			if c.log == "" {
				if err != nil || o.State != outcomeUnknownID || o.Instance != d.instance {
					t.Errorf("query answered %+v, %v; want %q from instance %s", o, err, outcomeUnknownID, d.instance)
				}
				return
			}
			// Closed with bytes unread, the connection ends in a reset.
			if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
				t.Errorf("read %v (%+v), want the connection closed unanswered", err, o)
			}
			if !strings.Contains(logs.String(), c.log) {
				t.Errorf("log %q does not say %q", logs.String(), c.log)
			}
			if n := h.Lands(); n != 0 {
				t.Errorf("Land called %d times", n)
			}
		})
	}
}

// msg is v as one control message.
func msg(t *testing.T, v any) []byte {
	var b bytes.Buffer
	if err := writeMsg(&b, v); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestResolveGivesUp: a destination that cannot be asked, that has not
// decided, or that answers garbage is asked again and again until the
// timeout, and then the error says whom, about what, and why.
func TestResolveGivesUp(t *testing.T) {
	const timeout = 1200 * time.Millisecond
	for _, c := range []struct {
		name string
		peer func(t *testing.T) (Transport, string)
		is   error
		text string
	}{{
		name: "unreachable",
		peer: func(t *testing.T) (Transport, string) {
			n := &faultNet{}
			n.refuse.Store(true)
			return n, "127.0.0.1:9"
		},
		is: errRefused,
	}, {
		name: "undecided",
		peer: func(t *testing.T) (Transport, string) {
			d, addr := serveDest(t, &fakeHost{}, DestinationOptions{Log: migtest.Log})
			if err := d.record("m", outcomePending, 0); err != nil {
				t.Fatal(err)
			}
			return TCP{}, addr
		},
		text: "has not decided yet",
	}, {
		name: "garbage",
		peer: func(t *testing.T) (Transport, string) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { l.Close() })
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					_, _ = c.Write(frame(7, "garbage"))
					c.Close()
				}
			}()
			return TCP{}, l.Addr().String()
		},
		text: "malformed",
	}} {
		t.Run(c.name, func(t *testing.T) {
			tr, peer := c.peer(t)
			start := time.Now()
			state, err := Resolve(context.Background(), tr, peer, "m", timeout)
			took := time.Since(start)
			switch {
			case err == nil:
				t.Fatalf("Resolve answered %q", state)
			case took < timeout || took > timeout+guard/10:
				t.Errorf("Resolve gave up after %v, its timeout %v", took, timeout)
			case c.is != nil && !errors.Is(err, c.is):
				t.Errorf("%v does not wrap %v", err, c.is)
			case !strings.Contains(err.Error(), c.text) || !strings.Contains(err.Error(), peer) ||
				!strings.HasPrefix(err.Error(), "orchestrator: asking "+peer+" about migration m: "):
				t.Errorf("%q does not say whom it asked, about what, and %q", err, c.text)
			}
		})
	}
}

// TestResolveAnswers: each final outcome is returned as the destination
// gives it.
func TestResolveAnswers(t *testing.T) {
	d, addr := serveDest(t, &fakeHost{}, DestinationOptions{Log: migtest.Log})
	for id, st := range map[string]string{"r": outcomeResumed, "a": outcomeAborted} {
		if err := d.record(id, st, 0); err != nil {
			t.Fatal(err)
		}
	}
	for id, want := range map[string]string{"r": outcomeResumed, "a": outcomeAborted, "x": outcomeUnknownID} {
		if got, err := Resolve(context.Background(), TCP{}, addr, id, guard); err != nil || got != want {
			t.Errorf("Resolve(%s) = %q, %v; want %q", id, got, err, want)
		}
	}
}

// TestMemoryOutcomesKeepWhatASourceMayAsk: old aborted outcomes are
// forgotten (they read "unknown", which tells a source the same), resumed
// and pending ones never (forgotten, they would read "unknown" and the
// source would resume a VM that runs here).
func TestMemoryOutcomesKeepWhatASourceMayAsk(t *testing.T) {
	var s MemoryOutcomes
	old := time.Now().Add(-2 * outcomeKeep)
	for id, st := range map[string]string{"resumed": outcomeResumed, "pending": outcomePending, "aborted": outcomeAborted} {
		if err := s.Save(id, Outcome{State: st, At: old}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Save("new", Outcome{State: outcomeAborted, At: time.Now()}); err != nil { // forgets what is too old
		t.Fatal(err)
	}
	for id, want := range map[string]string{
		"resumed": outcomeResumed, "pending": outcomePending, "aborted": "", "new": outcomeAborted,
	} {
		if o, _ := s.Load(id); o.State != want {
			t.Errorf("outcome of an old %s migration %q, want %q", id, o.State, want)
		}
	}
}
