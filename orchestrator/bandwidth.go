package orchestrator

import (
	"context"
	"errors"
	"net"
	"os"
	"sync"
	"time"
)

// One bandwidth limit covers a migration's two streams together, the vGPU
// stream and the VMM's RAM (Control.SetBandwidth):
//
//   - the vGPU stream's writes draw from a token bucket of the limit (a
//     Limiter; a write waits for its bytes' tokens);
//   - the VMM gets the share the vGPU stream leaves: limit − the vGPU
//     stream's rate measured over the last progressPeriod, never less than
//     limit/vmmShareFloor, set again every progressPeriod while the VMM
//     migrates (QEMU: migrate-set-parameters max-bandwidth).
//
// The vGPU's live phase runs before the VMM's migration (doc.go), so in
// practice each stream gets the whole limit while it runs alone. The
// VMM's switchover runs beside the vGPU's stop phase (switchover.go),
// whose stream stays under the bucket; QEMU sends its switchover's
// remaining RAM regardless of max-bandwidth (its completion flushes
// unthrottled), so for that moment the link may carry it on top of the
// limit, as it did when the switchover came after the stop phase.

// vmmShareFloor: the VMM is never given less than limit/vmmShareFloor, so
// its RAM stream keeps moving while the vGPU stream takes the rest (a
// VMM whose max-bandwidth is near zero never converges). gmigd's choice.
const vmmShareFloor = 16

// BandwidthSetter is a SourceVM whose VMM's RAM migration bandwidth can
// be changed while it migrates (QEMU: max-bandwidth).
type BandwidthSetter interface {
	SetMaxBandwidth(ctx context.Context, bytesPerSec uint64) error
}

// Limiter is a token bucket of Rate bytes/s, changeable at any time.
type Limiter struct {
	mu     sync.Mutex
	rate   uint64 // 0: unlimited
	tokens float64
	last   time.Time
	change chan struct{} // closed and replaced when the rate changes
}

// NewLimiter returns a Limiter of rate bytes/s (0: unlimited).
func NewLimiter(rate uint64) *Limiter {
	return &Limiter{rate: rate, change: make(chan struct{})}
}

// burstTime is how much of the rate the bucket holds: writes go out in
// chunks of at most 10 ms worth of the rate, so the rate holds over any
// 10 ms and a change takes effect within as much (gmigd's choice).
const burstTime = 10 * time.Millisecond

// minBurst is the least chunk: one 4 KiB page record and its framing fit
// (dirty.PageSize plus stream framing).
const minBurst = 8 << 10

// SetRate changes the rate (0: unlimited); writes waiting see it at once.
func (l *Limiter) SetRate(rate uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refillLocked(time.Now())
	l.rate = rate
	l.tokens = min(l.tokens, l.burstLocked())
	close(l.change)
	l.change = make(chan struct{})
}

// Rate is the rate now in bytes/s (0: unlimited).
func (l *Limiter) Rate() uint64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.rate
}

func (l *Limiter) burstLocked() float64 {
	return max(float64(l.rate)*burstTime.Seconds(), minBurst)
}

func (l *Limiter) refillLocked(now time.Time) {
	if !l.last.IsZero() {
		l.tokens = min(l.tokens+float64(l.rate)*now.Sub(l.last).Seconds(), l.burstLocked())
	}
	l.last = now
}

// errMoved ends a wait for tokens whose write deadline moved.
var errMoved = errors.New("orchestrator: write deadline moved")

// take waits until n bytes (at most a burst) may go and returns how many
// may go now; it gives up past deadline (zero: none), when moved is
// closed (errMoved) or when closed is (net.ErrClosed).
func (l *Limiter) take(n int, deadline time.Time, moved, closed <-chan struct{}) (int, error) {
	for {
		l.mu.Lock()
		if l.rate == 0 {
			l.mu.Unlock()
			return n, nil
		}
		now := time.Now()
		l.refillLocked(now)
		n = min(n, int(l.burstLocked()))
		if l.tokens >= float64(n) {
			l.tokens -= float64(n)
			l.mu.Unlock()
			return n, nil
		}
		wait := time.Duration((float64(n) - l.tokens) / float64(l.rate) * float64(time.Second))
		change := l.change
		l.mu.Unlock()
		if !deadline.IsZero() && now.Add(wait).After(deadline) {
			return 0, os.ErrDeadlineExceeded
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-change:
			t.Stop()
		case <-moved:
			t.Stop()
			return 0, errMoved
		case <-closed:
			t.Stop()
			return 0, net.ErrClosed
		}
	}
}

// limitedConn is a connection whose writes draw from a Limiter. A write
// deadline (SetWriteDeadline, SetDeadline) also ends a wait for tokens,
// as precopy uses it to interrupt a blocked write; CloseWrite is passed
// on.
type limitedConn struct {
	net.Conn
	l *Limiter

	mu       sync.Mutex
	deadline time.Time
	moved    chan struct{} // closed and replaced when the deadline moves
	closed   chan struct{}
	once     sync.Once
}

func newLimitedConn(c net.Conn, l *Limiter) *limitedConn {
	return &limitedConn{Conn: c, l: l, moved: make(chan struct{}), closed: make(chan struct{})}
}

func (c *limitedConn) Write(p []byte) (int, error) {
	written := 0
	for written < len(p) {
		c.mu.Lock()
		deadline, moved := c.deadline, c.moved
		c.mu.Unlock()
		n, err := c.l.take(len(p)-written, deadline, moved, c.closed)
		if errors.Is(err, errMoved) {
			continue // look at the new deadline
		}
		if err != nil {
			return written, err
		}
		m, err := c.Conn.Write(p[written : written+n])
		written += m
		if err != nil {
			return written, err
		}
	}
	return written, nil
}

func (c *limitedConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.deadline = t
	close(c.moved)
	c.moved = make(chan struct{})
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

func (c *limitedConn) SetDeadline(t time.Time) error {
	if err := c.SetWriteDeadline(t); err != nil {
		return err
	}
	return c.Conn.SetReadDeadline(t)
}

func (c *limitedConn) Close() error {
	c.once.Do(func() { close(c.closed) })
	return c.Conn.Close()
}

// CloseWrite half-closes the connection if it can (precopy's rollback).
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// changed returns a channel closed at the next change of the rate.
func (l *Limiter) changed() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.change
}

// vmmShare is what the VMM may use of limit while the vGPU stream moves
// vgpuRate bytes/s (the rule above); 0 when there is no limit.
func vmmShare(limit uint64, vgpuRate float64) uint64 {
	if limit == 0 {
		return 0
	}
	floor := limit / vmmShareFloor
	left := float64(limit) - vgpuRate
	if left < float64(floor) {
		return max(floor, 1)
	}
	return uint64(left)
}

// shareBandwidth keeps the VMM's RAM bandwidth at its share of the limit
// (vmmShare) while the VMM migrates: at once, every progressPeriod and at
// every change of the limit, until stop is called. A VM whose VMM cannot
// be told (no BandwidthSetter) is left as it is.
func (m *outgoing) shareBandwidth(ctx context.Context) (stop func()) {
	bs, ok := m.VM.(BandwidthSetter)
	if !ok {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(progressPeriod)
		defer t.Stop()
		set, setOnce := uint64(0), false
		_, lastB := m.src.Sent()
		lastT := time.Now()
		for {
			change := m.Control.limit.changed()
			_, b := m.src.Sent()
			now := time.Now()
			rate := float64(b-lastB) / max(now.Sub(lastT).Seconds(), 1e-9)
			lastB, lastT = b, now
			if share := vmmShare(m.Control.Bandwidth(), rate); !setOnce || share != set {
				if err := bs.SetMaxBandwidth(ctx, share); err != nil {
					m.log.Warn().Err(err).Uint64("bandwidth", share).Msg("setting the VMM's migration bandwidth")
				} else {
					set, setOnce = share, true
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			case <-change:
			}
		}
	}()
	return func() { cancel(); <-done }
}
