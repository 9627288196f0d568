package tests

import (
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// faultProxy is a TCP proxy in front of a destination gmigd's migration
// listener: the source is given its address, so the control, data and
// query connections between the daemons pass through it (QEMU's own RAM
// migration goes to the destination QEMU directly). It can cut every
// connection, stall them (hold what they carry, the sockets open), and
// flip one byte going to the destination. The connections are mutual
// TLS: the proxy sees records, not messages, so it acts on traffic, not
// on meaning.
type faultProxy struct {
	t  *testing.T
	l  net.Listener
	to string

	mu      sync.Mutex
	conns   []*proxied
	stalled chan struct{} // non-nil while stalled; closed when released
	flipAt  int64         // > 0: flip the byte at this offset of the first connection to carry it
	flipped bool
	onSend  func() // armed: runs before the next bytes towards the destination after a pause (onNextSend)
}

// sendPause is how long a connection is silent towards the destination
// before bytes that fire onNextSend: the vGPU's live phase may still be
// draining through the proxy when its end is reported; the stop phase
// starts after QEMU's pre-copy (seconds here).
const sendPause = 200 * time.Millisecond

// proxied is one connection through the proxy.
type proxied struct {
	src, dst net.Conn
	up       int64     // bytes passed towards the destination, under the proxy's mu
	lastUp   time.Time // when the last of them passed
}

func newFaultProxy(t *testing.T, to string) *faultProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{t: t, l: l, to: to}
	t.Cleanup(func() {
		l.Close()
		p.cut()
	})
	go p.accept()
	return p
}

// Addr is where the source migrates to.
func (p *faultProxy) Addr() string { return p.l.Addr().String() }

func (p *faultProxy) accept() {
	for {
		src, err := p.l.Accept()
		if err != nil {
			return
		}
		dst, err := net.Dial("tcp", p.to)
		if err != nil {
			src.Close()
			continue
		}
		c := &proxied{src: src, dst: dst}
		p.mu.Lock()
		p.conns = append(p.conns, c)
		p.mu.Unlock()
		go p.pipe(c, src, dst, true)
		go p.pipe(c, dst, src, false)
	}
}

// pipe copies one direction of c; up is the source-to-destination one.
func (p *faultProxy) pipe(c *proxied, from, to net.Conn, up bool) {
	defer from.Close()
	defer to.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 {
			b := p.fault(c, buf[:n], up)
			if b == nil {
				return
			}
			if _, werr := to.Write(b); werr != nil {
				return
			}
		}
		if err != nil {
			if err != io.EOF {
				return
			}
			if tc, ok := to.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			return
		}
	}
}

// fault applies what is armed to b on its way; nil: the connection is
// gone.
func (p *faultProxy) fault(c *proxied, b []byte, up bool) []byte {
	p.mu.Lock()
	var hook func()
	if up && p.onSend != nil && time.Since(c.lastUp) >= sendPause {
		hook, p.onSend = p.onSend, nil
	}
	p.mu.Unlock()
	if hook != nil {
		hook()
	}
	p.mu.Lock()
	stalled := p.stalled
	p.mu.Unlock()
	if stalled != nil {
		<-stalled
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if !up {
		return b
	}
	if p.flipAt > 0 && !p.flipped && c.up <= p.flipAt && p.flipAt < c.up+int64(len(b)) {
		b[p.flipAt-c.up] ^= 0x20
		p.flipped = true
	}
	c.up += int64(len(b))
	c.lastUp = time.Now()
	return b
}

// cut closes every connection through the proxy, both ends.
func (p *faultProxy) cut() {
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range conns {
		c.src.Close()
		c.dst.Close()
	}
}

// stall holds every byte from now on, the connections open, until
// release.
func (p *faultProxy) stall() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled == nil {
		p.stalled = make(chan struct{})
	}
}

// release lets held bytes go on (the connections a cut closed stay
// closed).
func (p *faultProxy) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stalled != nil {
		close(p.stalled)
		p.stalled = nil
	}
}

// flip flips the byte at offset n of the first connection whose bytes
// towards the destination reach it.
func (p *faultProxy) flip(n int64) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.flipAt, p.flipped = n, false
}

// onNextSend runs f before the next bytes a connection sends towards the
// destination after sendPause of silence pass.
func (p *faultProxy) onNextSend(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.onSend = f
}

// reset disarms everything and lets held bytes go.
func (p *faultProxy) reset() {
	p.mu.Lock()
	p.flipAt, p.onSend = 0, nil
	p.mu.Unlock()
	p.release()
}
