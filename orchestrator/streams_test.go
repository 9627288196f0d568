package orchestrator

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/precopy"
)

// TestAgreeStreams: the source opens what it wants, at most what the
// destination takes; a destination that says nothing (one before extra
// streams) gets one stream.
func TestAgreeStreams(t *testing.T) {
	for _, c := range []struct{ want, dest, got int }{
		{4, 8, 4}, {8, 2, 2}, {4, 0, 1}, {1, 8, 1}, {0, 64, precopy.DefaultStreams()},
	} {
		m := &outgoing{Source: Source{Precopy: precopy.Options{Streams: c.want}}}
		if got := m.agreeStreams(c.dest); got != c.got {
			t.Errorf("source wants %d, destination takes %d: %d streams, want %d", c.want, c.dest, got, c.got)
		}
	}
}

// TestRouteStreams: a destination hands a migration its data connection
// once and each extra stream index once, within what it takes; anything
// else is refused (the caller closes it) and leaves the slots as they
// were.
func TestRouteStreams(t *testing.T) {
	w := newWaiting(3)
	conn := func() net.Conn { a, _ := net.Pipe(); return a }
	for _, c := range []struct {
		h  hello
		ok bool
	}{
		{hello{Kind: kindStream, Index: 0}, false},
		{hello{Kind: kindStream, Index: 3}, false},
		{hello{Kind: kindStream, Index: 2}, true},
		{hello{Kind: kindStream, Index: 2}, false},
		{hello{Kind: kindData}, true},
		{hello{Kind: kindData}, false},
		{hello{Kind: kindStream, Index: 1}, true},
	} {
		err := w.routeLocked(conn(), c.h)
		if (err == nil) != c.ok || (err != nil && !errors.Is(err, errNoStream)) {
			t.Errorf("%s %d: %v, want accepted %v", c.h.Kind, c.h.Index, err, c.ok)
		}
	}
	if len(w.data) != 1 || len(w.extra) != 2 {
		t.Errorf("%d data and %d extra connections waiting, want 1 and 2", len(w.data), len(w.extra))
	}
	w.closeLeftLocked()
	if len(w.data) != 0 || len(w.extra) != 0 {
		t.Error("connections left waiting")
	}
	e := &extraStreams{w: newWaiting(2), timeout: 10 * time.Millisecond}
	if _, err := e.next(context.Background()); err == nil {
		t.Error("next returned without a stream")
	}
}

// TestLimitRates: the limit's terms are what must be scanned at the read
// rate, the stop phase's bytes over the link of its streams (the most
// measured beyond them) and at memcpy; and the measured rates are
// positive.
func TestLimitRates(t *testing.T) {
	r := LimitRates{Read: 4 << 30, Memcpy: 8 << 30, Link: []float64{1 << 30, 2 << 30}}
	l := r.Limit(1<<30, 512<<20, 2)
	if l.Scan != 250*time.Millisecond || l.Link != 250*time.Millisecond || l.Restore != 62500*time.Microsecond || l.Total() != 562500*time.Microsecond {
		t.Errorf("limit %+v", l)
	}
	if r.LinkRate(8) != 2<<30 || r.LinkRate(0) != 1<<30 || (LimitRates{}).LinkRate(1) != 0 {
		t.Errorf("link rates %v %v", r.LinkRate(8), r.LinkRate(0))
	}
	mem := make([]byte, 4<<20)
	read, cp := MeasureRead(mem, 2), MeasureMemcpy(mem)
	l1, err := MeasureLink(context.Background(), TCP{}, 1, mem[:64<<10], 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	l3, err := MeasureLink(context.Background(), TCP{}, 3, mem[:64<<10], 16<<20)
	if err != nil {
		t.Fatal(err)
	}
	if read <= 0 || cp <= 0 || l1 <= 0 || l3 <= 0 {
		t.Fatalf("read %v, memcpy %v, loopback %v and %v B/s", read, cp, l1, l3)
	}
	t.Logf("read %.2f GB/s, memcpy %.2f GB/s, loopback %.2f GB/s on 1 stream, %.2f on 3", read/1e9, cp/1e9, l1/1e9, l3/1e9)
}
