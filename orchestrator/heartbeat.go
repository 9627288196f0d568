package orchestrator

import (
	"context"
	"sync"
	"time"
)

// Beat is one guest HEARTBEAT write as a host saw it.
type Beat struct {
	Value uint64
	At    time.Time // host clock
}

// beatRing is how many recent beats Heartbeats keeps: a second of 1 ms
// heartbeats, far more than the time between a resume and the question.
const beatRing = 1024

// Heartbeats keeps one vGPU's recent guest heartbeats on one host. The
// guest writes an increasing value to its vGPU's HEARTBEAT register every
// period; its clock stops with the VM, so only a host clock sees how long
// it was paused: the gap between the last beat before the pause (source)
// and the first after the resume (destination) is the guest-observed
// downtime. Safe for concurrent use.
type Heartbeats struct {
	mu      sync.Mutex
	ring    [beatRing]Beat
	n       uint64        // beats recorded
	changed chan struct{} // closed and replaced on every beat
}

// NewHeartbeats returns an empty recorder.
func NewHeartbeats() *Heartbeats { return &Heartbeats{changed: make(chan struct{})} }

// Record adds a beat (the vGPU's heartbeat hook calls it).
func (h *Heartbeats) Record(value uint64, at time.Time) {
	h.mu.Lock()
	h.ring[h.n%beatRing] = Beat{value, at}
	h.n++
	close(h.changed)
	h.changed = make(chan struct{})
	h.mu.Unlock()
}

// Count is the number of beats recorded.
func (h *Heartbeats) Count() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n
}

// Last returns the latest beat, if any.
func (h *Heartbeats) Last() (Beat, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == 0 {
		return Beat{}, false
	}
	return h.ring[(h.n-1)%beatRing], true
}

// FirstAfter returns the earliest kept beat at or after t, waiting for one
// until ctx ends.
func (h *Heartbeats) FirstAfter(ctx context.Context, t time.Time) (Beat, bool) {
	for {
		h.mu.Lock()
		var found Beat
		ok := false
		start := uint64(0)
		if h.n > beatRing {
			start = h.n - beatRing
		}
		for i := start; i < h.n; i++ {
			if b := h.ring[i%beatRing]; !b.At.Before(t) {
				found, ok = b, true
				break
			}
		}
		ch := h.changed
		h.mu.Unlock()
		if ok {
			return found, true
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return Beat{}, false
		}
	}
}
