package precopy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/precopy/stream"
	"github.com/gmig-dev/gmig/vgpu"
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
				return migtest.Corrupt(p, s.lo+150), false
			}
			return nil, false
		}
	}},
	{name: "device state corrupted", strategy: Iterative, want: ErrRefused, src: func(context.CancelFunc) fault {
		return func(_ int64, p []byte, spans []span, _ *follower) ([]byte, bool) {
			if s, ok := has(spans, stream.DeviceState, 0); ok {
				return migtest.Corrupt(p, s.lo+(s.hi-s.lo)/2), false
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
// its self-checking workload runs: each migration fails and the source
// rolls back; Receive leaves the destination vGPU quiesced and the caller
// discards it, which empties the destination pool; a migration that failed
// after the guest paused left the source's memory as it was; and the guest
// goes on on the source (checking graphics memory against its model after
// every step). After all of them a migration succeeds, and the final
// digest equals a run that was never migrated.
func TestRollback(t *testing.T) {
	const (
		mem   = 8 << 20
		steps = 150
		seed  = 777
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(seed, 10))
	src, dst := migtest.NewPool(t, 4*mem), migtest.NewPool(t, 4*mem)
	cur := migtest.ServeNew(t, src, "g", mem)
	m := migtest.StartVM(ctx, t, cur, 3, seed, steps, guest.WorkloadConfig{Check: true})
	for i, c := range faultCases {
		countdown := 5 + rng.IntN(40)
		t.Run(c.name, func(t *testing.T) {
			err := failMigration(ctx, t, m, cur, dst, fmt.Sprintf("d%d", i), c.strategy, c.src, c.dst, countdown)
			switch {
			case !strings.HasPrefix(err.Error(), "precopy: "):
				t.Errorf("error %q lacks the package prefix", err)
			case strings.Count(err.Error(), "precopy: ") > 1 && !errors.Is(err, ErrRefused):
				t.Errorf("error %q repeats the package prefix", err)
			case c.want != nil && !errors.Is(err, c.want):
				t.Errorf("source error %v, want %v", err, c.want)
			}
			t.Logf("%v", err)
		})
	}
	_, rep, _ := migrateVM(ctx, t, m, cur, dst, hop{name: "final", opts: Options{Workers: 2, Log: migtest.Log}, countdown: rng.IntN(40)})
	t.Logf("after the faults, a migration:\n%s", rep)
	if err := m.Wait(); err != nil {
		t.Fatalf("workload: %v", err)
	}
	got := migtest.Digest(t, m)
	if want := migtest.Reference(ctx, t, src, seed, steps, mem, guest.WorkloadConfig{}); got != want {
		t.Fatalf("digest after %d failed migrations %x, never migrated %x", len(faultCases), got, want)
	}
}

// failMigration runs one migration of m's vGPU from cur into a vGPU the
// caller (it) created in p, with the given faults, and checks that it
// fails cleanly: Receive fails and leaves that vGPU quiesced, and
// discarding it empties p; Rollback leaves the source running, and, when
// the guest had paused (the fault came in the stop phase), with the memory
// it had at the pause. It returns the source's error; the guest is running
// again when it returns.
func failMigration(ctx context.Context, t *testing.T, m *sim.VM, cur *migtest.Served, p *pool.Pool, name string,
	strat Strategy, srcFault func(context.CancelFunc) fault, dstFault fault, countdown int) error {
	t.Helper()
	cfg := cur.V.Config()
	cfg.Name = name
	dv, err := vgpu.New(cfg, p, migtest.Log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dv.Close() })
	a, b := migtest.TCPPair(t)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var sconn, dconn net.Conn = a, b
	if srcFault != nil {
		sconn = &faultConn{Conn: a, fault: srcFault(cancel)}
	}
	if dstFault != nil {
		dconn = &faultConn{Conn: b, fault: dstFault}
	}
	recv := receive(ctx, dconn, dv, Options{Log: migtest.Log})
	s, err := NewSource(cur.V, sconn, Options{Strategy: strat, Workers: PipelineMinWorkers, BackgroundRate: 50000, Log: migtest.Log})
	if err != nil {
		t.Fatal(err)
	}
	paused, err := m.HoldAfter(countdown, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Resume()
	var frozen []byte // the source's memory at the pause
	err = s.Precopy(sctx)
	if err == nil {
		select {
		case <-paused:
		case <-m.Finished():
			t.Fatalf("the workload ended before the pause (%v)", m.Wait())
		}
		frozen = idleMemory(t, cur.V)
		_, err = s.Stop(sctx)
	}
	if err == nil {
		t.Fatal("the migration succeeded despite the fault")
	}
	s.Rollback()
	a.Close()
	if r := <-recv; r.err == nil {
		t.Fatal("the destination accepted the migration")
	}
	checkDiscarded(t, dv, p)
	if migtest.Quiesced(t, cur.V) {
		t.Fatal("the source vGPU is still quiesced after Rollback")
	}
	if frozen != nil && !bytes.Equal(idleMemory(t, cur.V), frozen) {
		t.Fatal("the failed migration changed the source's memory")
	}
	return err
}

// idleMemory waits until v's engine has run what it was given (the guest
// is paused: nothing more comes) and returns a copy of its memory.
func idleMemory(t *testing.T, v *vgpu.VGPU) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := v.Engine().WaitIdle(ctx); err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(v.Memory())
}
