package migtest

import (
	"bytes"
	"io"
	"net"
	"sync"
	"testing"
)

// Tap is a plain TCP relay in the middle of a stream, as an eavesdropper
// on the network would be: each connection it accepts is passed on to its
// target, both ways, and every byte towards the target is kept.
type Tap struct {
	t      testing.TB
	l      net.Listener
	target func() (string, error)

	mu      sync.Mutex
	streams []*bytes.Buffer // per connection, towards the target
	conns   []net.Conn
	closed  bool
	wg      sync.WaitGroup
}

// NewTap listens on loopback; each accepted connection dials target()
// (asked then, so it may be an address known only later). It is closed at
// the end of the test.
func NewTap(t testing.TB, target func() (string, error)) *Tap {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Tap{t: t, l: l, target: target}
	t.Cleanup(p.Close)
	p.wg.Add(1)
	go p.accept()
	return p
}

// Addr is the relay's address (host:port).
func (p *Tap) Addr() string { return p.l.Addr().String() }

func (p *Tap) accept() {
	defer p.wg.Done()
	for {
		src, err := p.l.Accept()
		if err != nil {
			return
		}
		to, err := p.target()
		var dst net.Conn
		if err == nil {
			dst, err = net.Dial("tcp", to)
		}
		if err != nil {
			p.t.Logf("tap: no target for a connection: %v", err)
			src.Close()
			continue
		}
		rec := &bytes.Buffer{}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			src.Close()
			dst.Close()
			return
		}
		p.streams = append(p.streams, rec)
		p.conns = append(p.conns, src, dst)
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(src, dst, rec)
		go p.pipe(dst, src, nil)
	}
}

// pipe copies from to to, keeping what passes in rec (if set) before it
// goes on: once the far end has a byte, the Tap has it too.
func (p *Tap) pipe(from, to net.Conn, rec *bytes.Buffer) {
	defer p.wg.Done()
	buf := make([]byte, 64<<10)
	for {
		n, err := from.Read(buf)
		if n > 0 && rec != nil {
			p.mu.Lock()
			rec.Write(buf[:n])
			p.mu.Unlock()
		}
		if n > 0 {
			if _, werr := to.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if err == io.EOF {
				if tc, ok := to.(*net.TCPConn); ok {
					_ = tc.CloseWrite()
				}
			}
			return
		}
	}
}

// Streams returns what each connection carried towards the target, in
// the order they were accepted.
func (p *Tap) Streams() [][]byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([][]byte, len(p.streams))
	for i, b := range p.streams {
		out[i] = bytes.Clone(b.Bytes())
	}
	return out
}

// Close stops accepting, ends the connections and waits for the copies.
func (p *Tap) Close() {
	p.l.Close()
	p.mu.Lock()
	p.closed = true
	for _, c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
