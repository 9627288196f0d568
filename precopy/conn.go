package precopy

import (
	"context"
	"time"
)

// The connection is the caller's: this package never closes it. It uses
// what a net.Conn offers beyond io.Reader and io.Writer when it is there;
// the helpers below take any connection and do nothing where it lacks it.

type readDeadliner interface{ SetReadDeadline(time.Time) error }
type writeDeadliner interface{ SetWriteDeadline(time.Time) error }
type closeWriter interface{ CloseWrite() error }

// interruptWrites makes a Write blocked on conn (and every later one) fail
// now, if conn has write deadlines.
func interruptWrites(conn any) {
	if d, ok := conn.(writeDeadliner); ok {
		_ = d.SetWriteDeadline(time.Now())
	}
}

// interruptReads makes a Read blocked on conn (and every later one) fail
// now, if conn has read deadlines.
func interruptReads(conn any) {
	if d, ok := conn.(readDeadliner); ok {
		_ = d.SetReadDeadline(time.Now())
	}
}

// watch interrupts conn's reads and writes when ctx ends, until the
// returned stop is called. Without deadlines on conn, a blocked call waits
// for conn; ctx is still checked between sections.
func watch(ctx context.Context, conn any) (stop func() bool) {
	return context.AfterFunc(ctx, func() {
		interruptWrites(conn)
		interruptReads(conn)
	})
}

// closeWrite half-closes conn, if it can, so the peer reads EOF.
func closeWrite(conn any) {
	if c, ok := conn.(closeWriter); ok {
		_ = c.CloseWrite()
	}
}

// watchReads interrupts conn's reads when ctx ends, until the returned
// stop is called; stop makes conn readable again if they were
// interrupted, so the caller can still drain it (Receive's refusal).
func watchReads(ctx context.Context, conn any) (stop func()) {
	fired := make(chan struct{})
	after := context.AfterFunc(ctx, func() {
		interruptReads(conn)
		close(fired)
	})
	return func() {
		if after() {
			return
		}
		<-fired
		if d, ok := conn.(readDeadliner); ok {
			_ = d.SetReadDeadline(time.Time{})
		}
	}
}
