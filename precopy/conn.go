package precopy

import (
	"context"
	"io"
	"time"
)

// The connection is the caller's: this package never closes it. It uses
// what a net.Conn offers beyond io.ReadWriter when it is there.

type readDeadliner interface{ SetReadDeadline(time.Time) error }
type writeDeadliner interface{ SetWriteDeadline(time.Time) error }
type closeWriter interface{ CloseWrite() error }

// interruptWrites makes a Write blocked on conn (and every later one) fail
// now, if conn has write deadlines.
func interruptWrites(conn io.ReadWriter) {
	if d, ok := conn.(writeDeadliner); ok {
		_ = d.SetWriteDeadline(time.Now())
	}
}

// interruptReads makes a Read blocked on conn (and every later one) fail
// now, if conn has read deadlines.
func interruptReads(conn io.ReadWriter) {
	if d, ok := conn.(readDeadliner); ok {
		_ = d.SetReadDeadline(time.Now())
	}
}

// watch interrupts conn's reads and writes when ctx ends, until the
// returned stop is called. Without deadlines on conn, a blocked call waits
// for conn; ctx is still checked between sections.
func watch(ctx context.Context, conn io.ReadWriter) (stop func() bool) {
	return context.AfterFunc(ctx, func() {
		interruptWrites(conn)
		interruptReads(conn)
	})
}

// closeWrite half-closes conn, if it can, so the peer reads EOF.
func closeWrite(conn io.ReadWriter) {
	if c, ok := conn.(closeWriter); ok {
		_ = c.CloseWrite()
	}
}
