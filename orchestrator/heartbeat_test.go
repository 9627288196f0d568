package orchestrator

import (
	"context"
	"testing"
	"time"
)

// TestHeartbeatsFirstAfter: the earliest beat at or after a time, among
// those kept.
func TestHeartbeatsFirstAfter(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	h := NewHeartbeats()
	for i, ms := range []int{0, 10, 20} {
		h.Record(uint64(i+1), at(ms))
	}
	for _, c := range []struct {
		after int
		want  uint64
	}{
		{-5, 1}, {0, 1}, {1, 2}, {10, 2}, {11, 3}, {20, 3},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), guard)
		b, ok := h.FirstAfter(ctx, at(c.after))
		cancel()
		if !ok || b.Value != c.want || !b.At.Equal(at(int(10*(c.want-1)))) {
			t.Errorf("FirstAfter(%d ms) = %+v %v, want beat %d", c.after, b, ok, c.want)
		}
	}
}

// TestHeartbeatsFirstAfterWaits: with no beat yet at or after the time,
// FirstAfter waits for one, passes over later beats before it, and gives
// up when its ctx ends.
func TestHeartbeatsFirstAfterWaits(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	h := NewHeartbeats()
	h.Record(1, at(0))
	go func() {
		h.Record(2, at(25))
		h.Record(3, at(30))
		h.Record(4, at(40))
	}()
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	if b, ok := h.FirstAfter(ctx, at(30)); !ok || b.Value != 3 {
		t.Errorf("FirstAfter(30 ms) = %+v %v, want beat 3", b, ok)
	}

	ctx, cancel = context.WithCancel(context.Background())
	cancel()
	if b, ok := h.FirstAfter(ctx, at(1000)); ok || b != (Beat{}) {
		t.Errorf("FirstAfter with no beat and its ctx ended = %+v %v", b, ok)
	}
}

// TestHeartbeatsRing: past the ring's size the oldest beats are dropped,
// and FirstAfter answers from those kept.
func TestHeartbeatsRing(t *testing.T) {
	t0 := time.Now()
	h := NewHeartbeats()
	const extra = 10
	for i := range beatRing + extra {
		h.Record(uint64(i), t0.Add(time.Duration(i)*time.Microsecond))
	}
	if n := h.Count(); n != beatRing+extra {
		t.Errorf("Count %d, want %d", n, beatRing+extra)
	}
	if b, ok := h.Last(); !ok || b.Value != beatRing+extra-1 {
		t.Errorf("Last = %+v %v", b, ok)
	}
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	if b, ok := h.FirstAfter(ctx, t0); !ok || b.Value != extra {
		t.Errorf("FirstAfter(the first beat's time) = %+v %v, want the oldest kept, %d", b, ok, extra)
	}
	if _, ok := NewHeartbeats().Last(); ok {
		t.Error("Last on no beats")
	}
}
