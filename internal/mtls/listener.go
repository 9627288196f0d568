package mtls

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"sync"

	"github.com/rs/zerolog"
)

// listener hands out only handshaken connections. One goroutine accepts
// TCP connections; each is handshaken in a goroutine of its own, bounded by
// the handshake timeout and by slots (at most MaxHandshakes at once); a
// connection whose handshake succeeded waits in ready for Accept.
type listener struct {
	inner net.Listener
	cfg   *tls.Config
	opts  Options
	log   zerolog.Logger

	ready chan *tls.Conn
	slots chan struct{}
	ctx   context.Context // ends at Close: handshakes in flight stop
	stop  context.CancelFunc
	done  chan struct{} // closed when the accept loop has ended
	err   error         // why it ended; read after done
	wg    sync.WaitGroup
	once  sync.Once
}

func newListener(inner net.Listener, cfg *tls.Config, o Options) *listener {
	ctx, stop := context.WithCancel(context.Background())
	l := &listener{
		inner: inner, cfg: cfg, opts: o, log: o.Log,
		ready: make(chan *tls.Conn),
		slots: make(chan struct{}, o.MaxHandshakes),
		ctx:   ctx, stop: stop,
		done: make(chan struct{}),
	}
	go l.acceptLoop()
	return l
}

func (l *listener) acceptLoop() {
	defer close(l.done)
	for {
		c, err := l.inner.Accept()
		if err != nil {
			l.err = err
			return
		}
		select {
		case l.slots <- struct{}{}:
		default:
			l.log.Warn().Str("peer", c.RemoteAddr().String()).Int("max_handshakes", l.opts.MaxHandshakes).
				Msg("migration peer refused: too many handshakes in flight")
			c.Close()
			continue
		}
		l.wg.Add(1)
		go l.handshake(c)
	}
}

// handshake authenticates c's peer and offers c to Accept, or closes it.
func (l *listener) handshake(c net.Conn) {
	defer l.wg.Done()
	tc := tls.Server(c, l.cfg)
	ctx, cancel := context.WithTimeout(l.ctx, l.opts.HandshakeTimeout)
	err := tc.HandshakeContext(ctx)
	cancel()
	<-l.slots
	if err != nil {
		tc.Close()
		if l.ctx.Err() != nil {
			return // closed: not the peer's fault
		}
		if errors.Is(err, context.DeadlineExceeded) {
			err = errHandshakeTimeout
		}
		logRefused(l.log.Warn(), err).Str("peer", c.RemoteAddr().String()).Str("role", "server").Msg("migration peer refused")
		return
	}
	logPeer(l.log.Info(), tc).Str("role", "server").Msg("migration peer authenticated")
	select {
	case l.ready <- tc:
	case <-l.ctx.Done():
		tc.Close()
	}
}

var errHandshakeTimeout = errors.New("mtls: TLS handshake not complete within the handshake timeout")

// Accept returns the next connection whose peer is authenticated.
func (l *listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.ctx.Done():
		return nil, net.ErrClosed
	case <-l.done:
		// The accept loop ended by itself: the listener failed.
		if l.ctx.Err() != nil {
			return nil, net.ErrClosed
		}
		return nil, l.err
	}
}

// Close stops accepting, interrupts the handshakes in flight and closes
// the connections no Accept has taken; it returns once they are all gone.
func (l *listener) Close() error {
	var err error
	l.once.Do(func() {
		l.stop()
		err = l.inner.Close()
		<-l.done
		l.wg.Wait()
	})
	return err
}

func (l *listener) Addr() net.Addr { return l.inner.Addr() }
