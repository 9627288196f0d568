package orchestrator

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// faultNet is a Transport over loopback TCP that breaks connections on
// cue, as a network and a dying gmigd do. Every connection it makes or
// accepts is a faultConn that knows its side and, from the hello, its
// kind; a fault names a side and a kind and fires once, on the first
// write there that its when accepts. A control message travels in one
// Write (writeMsg), so when can look at it whole (isMsg).
type faultNet struct {
	refuse atomic.Bool // Dial fails: the destination is unreachable

	mu     sync.Mutex
	faults []*fault
	conns  []*faultConn
	lists  []*faultListener
}

var (
	errCut     = errors.New("faultnet: connection cut")
	errRefused = errors.New("faultnet: connection refused")
)

// side is which end of a connection a faultConn is.
type side int

const (
	atSource side = iota // dialed by the source
	atDest               // accepted by a destination
)

func (s side) String() string { return [...]string{"source", "destination"}[s] }

// action is what a fault does to the write it fires on.
type action int

const (
	// actTruncate lets the bytes before the connection's byte offset
	// fault.at through, then cuts (the write fails).
	actTruncate action = iota
	// actCut fails the write and cuts the connection: this end closes,
	// the peer reads the end.
	actCut
	// actDrop reports the write done but sends nothing, then cuts: the
	// message is lost in flight with the connection.
	actDrop
	// actMute reports this write and every later one done but sends
	// nothing; Close still closes: the peer reads the end and nothing
	// before it.
	actMute
	// actStall is actMute on a partitioned network: Close does not reach
	// the peer either, which waits for bytes that never come.
	actStall
	// actCorrupt flips the write's last byte.
	actCorrupt
	// actPass lets the write through: the fault is only a cue (first).
	actPass
	// actRewrite writes fault.rewrite(p) instead of p.
	actRewrite
)

// fault is one planned failure.
type fault struct {
	side side
	kind string // kindMigrate, kindData, kindQuery
	// when says whether a write of p, after at bytes already written on
	// the connection, is the one; nil: the first write.
	when func(at int64, p []byte) bool
	act  action
	at   int64 // actTruncate's offset
	// first, if set, runs as the fault fires, before it acts (a cue for
	// what must already hold when the peer notices).
	first func()
	// rewrite is actRewrite's replacement of the write.
	rewrite func(p []byte) []byte
}

// add plans f.
func (n *faultNet) add(f *fault) {
	n.mu.Lock()
	n.faults = append(n.faults, f)
	n.mu.Unlock()
}

// take returns the unfired fault for a write of p on c, marking it fired.
func (n *faultNet) take(c *faultConn, kind string, at int64, p []byte) *fault {
	n.mu.Lock()
	defer n.mu.Unlock()
	for i, f := range n.faults {
		if f == nil || f.side != c.side || f.kind != kind || (f.when != nil && !f.when(at, p)) {
			continue
		}
		n.faults[i] = nil
		return f
	}
	return nil
}

// cutAfter is a source's data connection cut once n bytes of it got
// through.
func cutAfter(n int64) *fault {
	return &fault{side: atSource, kind: kindData, act: actTruncate, at: n,
		when: func(at int64, p []byte) bool { return at+int64(len(p)) > n }}
}

// isMsg reports whether p is one control message whose JSON object has
// key, with the value want if want is not nil.
func isMsg(p []byte, key string, want any) bool {
	if len(p) < 4 || int(binary.BigEndian.Uint32(p)) != len(p)-4 {
		return false
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(p[4:], &m) != nil {
		return false
	}
	v, ok := m[key]
	if !ok || want == nil {
		return ok
	}
	w, _ := json.Marshal(want)
	return bytes.Equal(v, w)
}

// isReady matches the destination's ready (not a refusal); isCommit the
// source's decision{commit: true}; isCommitted the destination's answer
// to it (committed has times, beat has not).
func isReady(_ int64, p []byte) bool     { return isMsg(p, "instance", nil) && !isMsg(p, "error", nil) }
func isCommit(_ int64, p []byte) bool    { return isMsg(p, "commit", true) }
func isCommitted(_ int64, p []byte) bool { return isMsg(p, "times", nil) }

// Dial connects to addr unless the network refuses.
func (n *faultNet) Dial(ctx context.Context, addr string) (net.Conn, error) {
	if n.refuse.Load() {
		return nil, fmt.Errorf("faultnet: dialing %s: %w", addr, errRefused)
	}
	c, err := TCP{}.Dial(ctx, addr)
	if err != nil {
		return nil, err
	}
	return n.track(c, atSource), nil
}

// Listen listens on addr; what it accepts is a destination's.
func (n *faultNet) Listen(addr string) (net.Listener, error) {
	l, err := TCP{}.Listen(addr)
	if err != nil {
		return nil, err
	}
	fl := &faultListener{Listener: l, n: n}
	n.mu.Lock()
	n.lists = append(n.lists, fl)
	n.mu.Unlock()
	return fl, nil
}

func (n *faultNet) track(c net.Conn, s side) *faultConn {
	fc := &faultConn{Conn: c, n: n, side: s}
	n.mu.Lock()
	n.conns = append(n.conns, fc)
	n.mu.Unlock()
	return fc
}

// stall partitions the connections of kind at side as they are: from now
// on their writes vanish and closing them sends nothing.
func (n *faultNet) stall(s side, kind string) {
	n.mu.Lock()
	conns := n.conns
	n.mu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		if c.side == s && c.kind == kind {
			c.mute, c.stalled = true, true
		}
		c.mu.Unlock()
	}
}

// hangUp closes the connections of kind at side, stalled ones included.
func (n *faultNet) hangUp(s side, kind string) {
	n.closeIf(func(c *faultConn) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.side == s && c.kind == kind
	})
}

// closeIf closes every connection so far for which match is true.
func (n *faultNet) closeIf(match func(*faultConn) bool) {
	n.mu.Lock()
	conns := n.conns
	n.mu.Unlock()
	for _, c := range conns {
		if match(c) {
			c.Conn.Close()
		}
	}
}

// count is how many connections of side have shown kind in their hello.
func (n *faultNet) count(s side, kind string) int {
	n.mu.Lock()
	conns := n.conns
	n.mu.Unlock()
	k := 0
	for _, c := range conns {
		c.mu.Lock()
		if c.side == s && c.kind == kind {
			k++
		}
		c.mu.Unlock()
	}
	return k
}

// killDest is a destination gmigd dying: its listeners and every
// connection it accepted close at once.
func (n *faultNet) killDest() {
	n.mu.Lock()
	lists := n.lists
	n.lists = nil
	n.mu.Unlock()
	for _, l := range lists {
		l.Close()
	}
	n.closeIf(func(c *faultConn) bool { return c.side == atDest })
}

// killSource is the source gmigd dying: every connection it dialed
// closes at once, with nothing more said.
func (n *faultNet) killSource() {
	n.closeIf(func(c *faultConn) bool { return c.side == atSource })
}

// cut is the network between the hosts failing: every connection
// closes at both ends (each peer reads the end or a reset).
func (n *faultNet) cut() {
	n.closeIf(func(*faultConn) bool { return true })
}

// closeAll closes every socket, stalled ones included (test cleanup).
func (n *faultNet) closeAll() {
	n.mu.Lock()
	lists, conns := n.lists, n.conns
	n.mu.Unlock()
	for _, l := range lists {
		l.Close()
	}
	for _, c := range conns {
		c.Conn.Close()
	}
}

type faultListener struct {
	net.Listener
	n *faultNet
}

func (l *faultListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return l.n.track(c, atDest), nil
}

// faultConn is one end of a connection. It learns the connection's kind
// from the hello: the first message the source writes, the destination
// reads.
type faultConn struct {
	net.Conn
	n    *faultNet
	side side

	mu      sync.Mutex
	hello   []byte // the hello's bytes so far
	kind    string
	known   bool  // the hello has been seen
	written int64 // bytes written through
	mute    bool  // writes vanish (actMute, actStall)
	stalled bool  // Close does not close the socket (actStall)
}

// sniffLocked takes the next bytes of the hello's direction.
func (c *faultConn) sniffLocked(b []byte) {
	if c.known {
		return
	}
	c.hello = append(c.hello, b...)
	if len(c.hello) < 4 {
		return
	}
	size := int64(binary.BigEndian.Uint32(c.hello))
	if size > maxMessage {
		c.known, c.hello = true, nil
		return
	}
	if int64(len(c.hello)-4) < size {
		return
	}
	var h hello
	_ = json.Unmarshal(c.hello[4:4+size], &h)
	c.kind, c.known, c.hello = h.Kind, true, nil
}

func (c *faultConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if c.side == atDest && n > 0 {
		c.mu.Lock()
		c.sniffLocked(p[:n])
		c.mu.Unlock()
	}
	return n, err
}

func (c *faultConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.side == atSource {
		c.sniffLocked(p)
	}
	kind, at, mute := c.kind, c.written, c.mute
	c.mu.Unlock()
	if mute {
		return len(p), nil
	}
	f := c.n.take(c, kind, at, p)
	if f == nil {
		return c.write(p)
	}
	if f.first != nil {
		f.first()
	}
	switch f.act {
	case actTruncate:
		n, err := c.write(p[:f.at-at])
		c.Conn.Close()
		if err == nil {
			err = errCut
		}
		return n, err
	case actCut:
		c.Conn.Close()
		return 0, errCut
	case actDrop:
		c.Conn.Close()
		return len(p), nil
	case actMute, actStall:
		c.mu.Lock()
		c.mute, c.stalled = true, f.act == actStall
		c.mu.Unlock()
		return len(p), nil
	case actCorrupt:
		q := append([]byte(nil), p...)
		q[len(q)-1] ^= 0x5a
		return c.write(q)
	case actPass:
		return c.write(p)
	case actRewrite:
		if _, err := c.write(f.rewrite(p)); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	panic(fmt.Sprintf("faultnet: action %d", f.act))
}

func (c *faultConn) write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.mu.Lock()
	c.written += int64(n)
	c.mu.Unlock()
	return n, err
}

// Close closes the socket, unless the connection is stalled: then only
// this end's calls in flight end, and the peer hears nothing.
func (c *faultConn) Close() error {
	c.mu.Lock()
	stalled := c.stalled
	c.mu.Unlock()
	if stalled {
		return c.Conn.SetDeadline(time.Now())
	}
	return c.Conn.Close()
}

// CloseWrite half-closes, as a *net.TCPConn does (precopy uses it).
func (c *faultConn) CloseWrite() error {
	c.mu.Lock()
	mute := c.mute
	c.mu.Unlock()
	if mute {
		return nil
	}
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
