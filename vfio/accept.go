package vfio

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Admission: who gets the device. One client is served at a time (the
// device has one DMA table and one set of interrupt eventfds, both the
// client's), but the socket keeps accepting while a client is served, so a
// second client is never left unanswered in the listen backlog:
//
//   - it waits up to BusyWait for the served client to leave, and is served
//     if it does (a client reconnecting right after its predecessor closed);
//   - otherwise it is refused: its first message, which must arrive within
//     the message timeout, gets an error reply with errno EBUSY (none when
//     it is a No_reply command), the connection is closed, and one line is
//     logged. QEMU's client fails the device on an error reply to VERSION,
//     naming the errno (hw/vfio-user/proxy.c, vfio_user_validate_version:
//     "version reply"). The served client never notices.
//
// Waiting and refused connections never touch the device, the DMA table or
// the IRQ table, and at most maxWaitingClients of them are held at once.

// maxWaitingClients bounds the connections waiting or being refused at
// once; each holds a goroutine and a descriptor for at most BusyWait plus
// the message timeout. QEMU attaches one client per device, so more than a
// few at once is a misbehaving peer: further connections are closed as soon
// as they are accepted, without a reply.
const maxWaitingClients = 4

// Serve accepts clients on l and serves them one at a time, each as
// ServeConn does; a client that connects while another is served waits or
// is refused as the package documentation's Limits section says. Serve
// returns ctx.Err() once ctx is cancelled (it then sets a past deadline on
// l to stop Accept and closes every connection), nil when l is closed, or
// an accept error; in every case only after every connection it accepted
// is finished, so a client being served when l is closed is served to its
// end.
func (s *Server) Serve(ctx context.Context, l *net.UnixListener) error {
	stop := context.AfterFunc(ctx, func() { l.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	var conns sync.WaitGroup
	defer conns.Wait()
	waiting := make(chan struct{}, maxWaitingClients)
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("vfio: accepting client: %w", err)
		}
		select {
		case s.slot <- struct{}{}:
			conns.Go(func() { s.serveHeld(ctx, c) })
			continue
		default:
		}
		select {
		case waiting <- struct{}{}:
			conns.Go(func() {
				if waited, ok := s.awaitSlot(ctx, c); ok {
					<-waiting
					s.serveHeld(ctx, c)
				} else {
					s.refuse(ctx, c, waited)
					<-waiting
				}
			})
		default:
			s.log.Warn().Int32("peer_pid", peerPID(c)).Int32("served_pid", s.servedPID.Load()).
				Int("waiting", maxWaitingClients).Msg("vfio-user client refused: too many clients waiting")
			c.Close()
		}
	}
}

// awaitSlot waits up to the server's busy wait for the served client to
// leave. ok reports that the caller now holds the slot.
func (s *Server) awaitSlot(ctx context.Context, c *net.UnixConn) (waited time.Duration, ok bool) {
	start := time.Now()
	timer := time.NewTimer(s.busyWait)
	defer timer.Stop()
	select {
	case s.slot <- struct{}{}:
		return time.Since(start), true
	case <-ctx.Done():
	case <-timer.C:
	}
	return time.Since(start), false
}

// refuse answers c's first message with EBUSY, closes c and logs one line.
// The message must arrive, and the reply be taken, within the message
// timeout.
func (s *Server) refuse(ctx context.Context, c *net.UnixConn, waited time.Duration) {
	defer c.Close()
	if ctx.Err() != nil {
		return
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	ev := s.log.Warn().Int32("peer_pid", peerPID(c)).Int32("served_pid", s.servedPID.Load()).Dur("waited", waited)
	c.SetDeadline(time.Now().Add(s.msgTimeout))
	t := newTransport(c) // no message timeout of its own: the deadline above covers the exchange
	m, err := t.recv(s.maxMsgSize())
	var fe *frameError
	if err != nil && !errors.As(err, &fe) {
		ev.Str("reply", "none").Err(fmt.Errorf("vfio: no request within %v: %w", s.msgTimeout, err)).
			Msg("vfio-user client refused: another client is attached")
		return
	}
	m.closeFDs()
	h := m.hdr
	ev = ev.Str("cmd", CommandName(h.Command)).Uint16("id", h.ID)
	if h.Type() == FlagTypeCommand && h.Flags&FlagNoReply != 0 {
		ev.Str("reply", "none").Msg("vfio-user client refused: another client is attached")
		return
	}
	err = t.send(Header{ID: h.ID, Command: h.Command, Flags: FlagTypeReply | FlagError, Error: uint32(unix.EBUSY)},
		newFrame(0), nil)
	ev.Str("reply", unix.ErrnoName(unix.EBUSY)).AnErr("reply_error", err).
		Msg("vfio-user client refused: another client is attached")
}
