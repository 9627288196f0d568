package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	"github.com/gmig-dev/gmig/precopy"
)

// The vGPU's stop phase on several streams (docs/migration-protocol.md
// §1): the destination says in ready how many streams it takes; the
// source opens that many less one extra connections (kind "stream", each
// with the migration's ID and its index) right after the data connection,
// while the VM runs, and precopy spreads the stop phase's pages over them
// and the data connection. A destination that does not say (one before
// them) gets one stream.

// agreeStreams is the stop phase's stream count: what the source wants
// (Precopy.Streams; 0: precopy.DefaultStreams), at most what the
// destination takes (0: it predates extra streams, 1).
func (m *outgoing) agreeStreams(dest int) int {
	want := m.Precopy.Streams
	if want == 0 {
		want = precopy.DefaultStreams()
	}
	return max(1, min(want, dest))
}

// openStreams dials the stop phase's extra streams and gives them to the
// Source.
func (m *outgoing) openStreams(ctx context.Context) error {
	if m.streams < 2 {
		return nil
	}
	conns := make([]io.ReadWriter, 0, m.streams-1)
	for i := 1; i < m.streams; i++ {
		c, err := dialHello(ctx, m.Transport, m.Peer, hello{Version: ProtocolVersion, Kind: kindStream, ID: m.id, Index: i}, m.Timeouts.Message)
		if err != nil {
			return fmt.Errorf("opening the stop phase's stream %d of %d: %w", i, m.streams, err)
		}
		m.extra = append(m.extra, c)
		conns = append(conns, c)
	}
	return m.src.AddStreams(conns...)
}

// waiting is an incoming migration's streams, as they connect: the data
// connection, then the extra ones.
type waiting struct {
	data    chan net.Conn // the data connection, once
	extra   chan net.Conn // extra streams, each index once
	streams int           // the most this destination takes
	gotData bool
	indices map[int]bool
}

func newWaiting(streams int) *waiting {
	return &waiting{data: make(chan net.Conn, 1), extra: make(chan net.Conn, max(0, streams-1)),
		streams: streams, indices: map[int]bool{}}
}

// errNoStream is a connection for no slot a migration waits for.
var errNoStream = errors.New("orchestrator: a stream for no migration waiting for it")

// routeLocked hands c, with hello h, to the migration waiting for it, or says
// why not (the caller closes c). d.mu is held.
func (w *waiting) routeLocked(c net.Conn, h hello) error {
	if h.Kind == kindData {
		if w.gotData {
			return fmt.Errorf("%w: a second data connection", errNoStream)
		}
		w.gotData = true
		w.data <- c // buffered: the migration owns and closes it
		return nil
	}
	if h.Index < 1 || h.Index >= w.streams || w.indices[h.Index] {
		return fmt.Errorf("%w: stream %d (this destination takes %d, taken %v)", errNoStream, h.Index, w.streams, w.indices)
	}
	w.indices[h.Index] = true
	w.extra <- c // buffered: one slot per index
	return nil
}

// closeLeftLocked closes the streams no one took. d.mu is held, and w is no
// longer in d.data.
func (w *waiting) closeLeftLocked() {
	for _, ch := range []chan net.Conn{w.data, w.extra} {
	drain:
		for {
			select {
			case c := <-ch:
				c.Close()
			default:
				break drain
			}
		}
	}
}

// extraStreams is precopy's NextStream for an incoming migration: the
// next extra stream as it connects, within the data timeout; it keeps
// every connection it hands out for closeAll.
type extraStreams struct {
	w       *waiting
	timeout time.Duration
	mu      sync.Mutex
	taken   []net.Conn
}

func (e *extraStreams) next(ctx context.Context) (io.Reader, error) {
	select {
	case c := <-e.w.extra:
		e.mu.Lock()
		e.taken = append(e.taken, c)
		e.mu.Unlock()
		return c, nil
	case <-time.After(e.timeout):
		return nil, errors.New("orchestrator: an extra stream of the stop phase did not arrive")
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (e *extraStreams) closeAll() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, c := range e.taken {
		c.Close()
	}
}
