package precopy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/precopy/stream"
)

// fault is a faultConn's hook.
type fault func(off int64, p []byte, spans []span, f *follower) (q []byte, cut bool)

// has reports whether spans include the payload of the nth section of type
// typ (nth 0: any).
func has(spans []span, typ stream.SectionType, nth int) (span, bool) {
	for _, s := range spans {
		if s.typ == typ && (nth == 0 || s.nth == nth) {
			return s, true
		}
	}
	return span{}, false
}

// corrupt returns a copy of p with the byte at p[i] flipped.
func corrupt(p []byte, i int) []byte {
	q := append([]byte(nil), p...)
	q[i] ^= 0x5a
	return q
}

// faultCases are the failures TestRollback injects, one migration each.
// src builds the source side's hook (cancel cancels the source's ctx);
// dst is the destination side's.
var faultCases = []struct {
	name     string
	strategy Strategy
	src      func(cancel context.CancelFunc) fault
	dst      fault
	want     error // the source's error wraps it (nil: any error)
}{
	{name: "cut in pre-copy", strategy: OneShot, src: func(context.CancelFunc) fault {
		return func(_ int64, _ []byte, spans []span, _ *follower) ([]byte, bool) {
			_, ok := has(spans, stream.PageBatch, 3)
			return nil, ok
		}
	}},
	{name: "cut in stop-phase pages", strategy: StopCopy, src: func(context.CancelFunc) fault {
		return func(_ int64, _ []byte, spans []span, _ *follower) ([]byte, bool) {
			_, ok := has(spans, stream.PageBatch, 2)
			return nil, ok
		}
	}},
	{name: "cut in device state", strategy: OneShot, src: func(context.CancelFunc) fault {
		return func(_ int64, _ []byte, spans []span, _ *follower) ([]byte, bool) {
			_, ok := has(spans, stream.DeviceState, 0)
			return nil, ok
		}
	}},
	{name: "cut before the verdict", strategy: Iterative,
		dst: func(int64, []byte, []span, *follower) ([]byte, bool) { return nil, true }},
	{name: "page corrupted in pre-copy", strategy: OneShot, want: ErrRefused, src: func(context.CancelFunc) fault {
		return func(_ int64, p []byte, spans []span, _ *follower) ([]byte, bool) {
			if s, ok := has(spans, stream.PageBatch, 3); ok && s.hi-s.lo > 200 {
				return corrupt(p, s.lo+150), false
			}
			return nil, false
		}
	}},
	{name: "device state corrupted", strategy: Iterative, want: ErrRefused, src: func(context.CancelFunc) fault {
		return func(_ int64, p []byte, spans []span, _ *follower) ([]byte, bool) {
			if s, ok := has(spans, stream.DeviceState, 0); ok {
				return corrupt(p, s.lo+(s.hi-s.lo)/2), false
			}
			return nil, false
		}
	}},
	{name: "cancelled in pre-copy", strategy: OneShot, want: context.Canceled, src: func(cancel context.CancelFunc) fault {
		return func(_ int64, _ []byte, spans []span, _ *follower) ([]byte, bool) {
			if _, ok := has(spans, stream.PageBatch, 2); ok {
				cancel()
			}
			return nil, false
		}
	}},
	{name: "cancelled in stop", strategy: OneShot, want: context.Canceled, src: func(cancel context.CancelFunc) fault {
		return func(_ int64, _ []byte, spans []span, _ *follower) ([]byte, bool) {
			if s, ok := has(spans, stream.Meta, 2); ok && s.payload == 0 { // the stop Meta
				cancel()
			}
			return nil, false
		}
	}},
}

// TestRollback injects each fault into a migration of a guest's vGPU while
// its self-checking workload runs: each migration fails, the source rolls
// back, the destination pool is left empty, and the guest goes on on the
// source (checking graphics memory against its model after every step).
// After all of them a migration succeeds, and the final digest equals a
// run that was never migrated.
func TestRollback(t *testing.T) {
	const (
		mem   = 8 << 20
		steps = 150
		seed  = 777
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(seed, 10))
	src, dst := newPool(t, 4*mem), newPool(t, 4*mem)
	cur := serveNew(t, src, "g", mem)
	m := startVM(ctx, t, cur, 3, seed, steps, true)
	for i, c := range faultCases {
		err := failMigration(ctx, t, m, cur, dst, fmt.Sprintf("d%d", i), c.strategy, c.src, c.dst, 5+rng.IntN(40))
		switch {
		case !strings.HasPrefix(err.Error(), "precopy: "):
			t.Errorf("%s: error %q lacks the package prefix", c.name, err)
		case strings.Count(err.Error(), "precopy: ") > 1 && !errors.Is(err, ErrRefused):
			t.Errorf("%s: error %q repeats the package prefix", c.name, err)
		case c.want != nil && !errors.Is(err, c.want):
			t.Errorf("%s: source error %v, want %v", c.name, err, c.want)
		}
		t.Logf("%s: %v", c.name, err)
	}
	cur, rep := migrateVM(ctx, t, m, cur, dst, "final", Options{Workers: 2, Log: testLog}, rng.IntN(40))
	t.Logf("after the faults, a migration:\n%s", rep)
	if err := <-m.done; err != nil {
		t.Fatalf("workload: %v", err)
	}
	got := m.digest()
	if want := reference(ctx, t, src, seed, steps, mem); got != want {
		t.Fatalf("digest after %d failed migrations %x, never migrated %x", len(faultCases), got, want)
	}
}

// failMigration runs one migration of m's vGPU from cur into p with the
// given faults and checks that it fails cleanly: Rollback resumes the
// source, Receive fails, and p holds no partition. It returns the source's
// error; the guest is running again when it returns.
func failMigration(ctx context.Context, t *testing.T, m *vm, cur *served, p *pool.Pool, name string,
	strat Strategy, srcFault func(context.CancelFunc) fault, dstFault fault, countdown int) error {
	t.Helper()
	a, b := tcpPair(t)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var sconn, dconn net.Conn = a, b
	if srcFault != nil {
		sconn = &faultConn{Conn: a, fault: srcFault(cancel)}
	}
	if dstFault != nil {
		dconn = &faultConn{Conn: b, fault: dstFault}
	}
	recv := receive(ctx, dconn, p, name, nil)
	s, err := NewSource(cur.v, sconn, Options{Strategy: strat, Workers: 2, BackgroundRate: 50000, Log: testLog})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	paused, resume := m.gate.pauseAfter(countdown)
	defer resume()
	err = s.Precopy(sctx)
	if err == nil {
		select {
		case <-paused:
		case err := <-m.done:
			t.Fatalf("%s: the workload ended before the pause (%v)", name, err)
		}
		_, err = s.Stop(sctx)
	}
	if err == nil {
		t.Fatalf("%s: the migration succeeded despite the fault", name)
	}
	s.Rollback()
	a.Close()
	if r := <-recv; r.err == nil || r.v != nil {
		t.Fatalf("%s: the destination accepted the migration", name)
	}
	if parts := p.Partitions(); len(parts) != 0 {
		t.Fatalf("%s: the destination pool keeps partitions %v", name, parts)
	}
	return err
}
