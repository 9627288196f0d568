package precopy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/precopy/stream"
	"github.com/gmig-dev/gmig/vgpu"
)

// hop is one migration of a guest's vGPU (migrateVM).
type hop struct {
	name string
	opts Options
	// hold, if set, holds the link at the pre-copy's last page batch of its
	// first pass until the guest's progress since satisfies it: the link is
	// slow, as a real one is beside gigabytes of graphics memory, and the
	// guest runs while its memory is sent.
	hold func(sim.Progress) bool
	// After the pre-copy, the guest pauses once it has passed countdown
	// more operation boundaries and its progress since the pre-copy ended
	// satisfies pauseWhen (nil: at once).
	countdown int
	pauseWhen func(sim.Progress) bool
}

// migrateVM migrates the guest m, running on from, to a vGPU in to, as the
// two hosts do: the destination vGPU is created with the source's sizes
// and served before the migration; the pre-copy runs while the workload
// does; the guest is paused at an operation boundary after it (a guest
// without a workload counts as paused); Stop and Receive complete; the
// guest is re-attached to the destination keeping its RAM, the destination
// vGPU resumes, the source vGPU is destroyed and the guest goes on. It
// returns the destination, the source's report and the guest's progress
// while Precopy ran.
func migrateVM(ctx context.Context, t *testing.T, m *sim.VM, from *migtest.Served, to *pool.Pool, h hop) (*migtest.Served, Report, sim.Progress) {
	t.Helper()
	cfg := from.V.Config()
	cfg.Name = h.name
	v, err := vgpu.New(cfg, to, migtest.Log)
	if err != nil {
		t.Fatal(err)
	}
	next := migtest.Serve(t, v)
	a, b := migtest.TCPPair(t)
	if h.hold != nil {
		a = holdLink(ctx, t, m, a, cfg.MemSize, h.hold)
	}
	recv := receive(ctx, b, v, Options{Log: migtest.Log})
	s, err := NewSource(from.V, a, h.opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	mark := m.Mark()
	if err := s.Precopy(ctx); err != nil {
		t.Fatalf("%s: pre-copy: %v", h.name, err)
	}
	during := m.Since(mark)
	paused, err := m.HoldAfter(h.countdown, h.pauseWhen)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Resume()
	if m.Workload() != nil {
		select {
		case <-paused:
		case <-m.Finished():
			t.Fatalf("%s: the workload ended before the pause (%v): give it more steps", h.name, m.Wait())
		}
	}
	rep, err := s.Stop(ctx)
	if err != nil {
		t.Fatalf("%s: stop: %v", h.name, err)
	}
	if r := <-recv; r.err != nil {
		t.Fatalf("%s: receive: %v", h.name, r.err)
	}
	migtest.MoveTo(t, m, next)
	v.Resume()
	from.Close()
	return next, rep, during
}

// holdLink returns conn with its writes held once, at the first write of
// the pre-copy's page batch nth = its first pass's last, until the guest's
// progress from then on satisfies until. Every page has been copied and
// recorded by then, so what the guest writes meanwhile is dirty.
func holdLink(ctx context.Context, t *testing.T, m *sim.VM, conn net.Conn, mem uint64, until func(sim.Progress) bool) net.Conn {
	last := int((mem/dirty.PageSize + liveBatch - 1) / liveBatch)
	held := false
	return &faultConn{Conn: conn, fault: func(_ int64, _ []byte, spans []span, f *follower) ([]byte, bool) {
		if _, ok := has(spans, stream.PageBatch, last); !ok || held || f.sections[stream.Meta] > 1 {
			return nil, false
		}
		held = true
		if err := m.Await(ctx, m.Mark(), until); err != nil {
			t.Errorf("holding the pre-copy's last batch: %v", err)
			return nil, true // the pre-copy fails
		}
		return nil, false
	}}
}

// TestMigrateUnderWorkload is issue 4's evidence: a guest runs a seeded,
// self-checking workload over most of its graphics memory continuously
// while its vGPU migrates back and forth between two hosts' pools nine
// times, at random operation boundaries after the pre-copy, with every
// strategy; the workload checks graphics memory against its model after
// every step, and its final digest equals that of a run of the same seed
// that was never migrated.
//
// The link holds each pre-copy at its first pass's last batch until the
// guest has run 24 operations, two of them CPU stores through the
// aperture, and the guest pauses only after another CPU store: each
// pre-copy overlaps guest work (checked from the workload's counts), each
// iterative pre-copy has dirty pages to iterate on (at least two rounds),
// and each stop finds pages that only their content gives away (the
// stores through the aperture and the ring, which the engine never sees).
func TestMigrateUnderWorkload(t *testing.T) {
	const (
		mem        = 8 << 20
		steps      = 160
		migrations = 9
		seed       = 4242
	)
	wcfg := guest.WorkloadConfig{MemSize: mem * 3 / 4, Check: true}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(seed, 9))
	hosts := [2]*pool.Pool{migtest.NewPool(t, 4*mem), migtest.NewPool(t, 4*mem)}
	_ = migtest.NewVGPU(t, hosts[0], "filler", 1<<20) // host 0's partitions start elsewhere than host 1's
	cur := migtest.ServeNew(t, hosts[0], "g0", mem)
	m := migtest.StartVM(ctx, t, cur, 1, seed, steps, wcfg)
	for i := range migrations {
		strat := Strategies[i%len(Strategies)]
		h := hop{
			name: fmt.Sprintf("g%d", i+1),
			// Odd hops have PipelineMinWorkers: the pipelined stop phase.
			opts:      Options{Strategy: strat, Workers: 2 + 2*(i%2), Log: migtest.Log},
			countdown: 5 + rng.IntN(30),
		}
		if strat != StopCopy {
			h.hold = func(p sim.Progress) bool { return p.Total() >= 24 && p.Ops[guest.OpCPUWrite] >= 2 }
			h.pauseWhen = func(p sim.Progress) bool { return p.Ops[guest.OpCPUWrite] >= 1 }
		}
		switch {
		case strat == Iterative:
			h.opts.ConvergePages, h.opts.MaxRounds = 8, 4
		case strat == OneShot && i >= len(Strategies):
			h.opts.BackgroundRate = 100000
		}
		from := cur.V.Partition().Offset
		var (
			rep    Report
			during sim.Progress
		)
		cur, rep, during = migrateVM(ctx, t, m, cur, hosts[(i+1)%2], h)
		t.Logf("migration %d (%s, pool offset %#x -> %#x, guest paused at step %d; during the pre-copy: %v):\n%s",
			i+1, strat, from, cur.V.Partition().Offset, m.StoppedAt(), during, rep)
		checkUnderWorkload(t, i+1, h.opts, rep, during)
	}
	if err := m.Wait(); err != nil {
		t.Fatalf("workload after %d migrations: %v", migrations, err)
	}
	if _, size := m.Workload().Region(); size < mem*3/4 {
		t.Fatalf("the workload used %d bytes of the vGPU's %d", size, mem)
	}
	got := migtest.Digest(t, m)
	if want := migtest.Reference(ctx, t, hosts[0], seed, steps, mem, wcfg); got != want {
		t.Fatalf("digest after %d migrations %x, never migrated %x", migrations, got, want)
	}
}

// checkUnderWorkload checks what one migration of TestMigrateUnderWorkload
// must show: a pre-copy that overlapped guest work, CPU stores through the
// aperture among it, iterative rounds, and a stop that found pages by
// their content.
func checkUnderWorkload(t *testing.T, n int, opts Options, rep Report, during sim.Progress) {
	t.Helper()
	p, s := rep.Precopy, rep.Stop
	if opts.Strategy == StopCopy {
		if p.Pages != 0 || p.Rounds != 0 {
			t.Errorf("migration %d: stop-and-copy sent %d pages in %d rounds live", n, p.Pages, p.Rounds)
		}
		return
	}
	if during.Steps == 0 || during.Ops[guest.OpCPUWrite] == 0 {
		t.Errorf("migration %d (%s): while the pre-copy ran the guest did %v: want steps and CPU stores through the aperture",
			n, opts.Strategy, during)
	}
	if opts.Strategy == Iterative && p.Rounds < 2 {
		t.Errorf("migration %d: iterative pre-copy ran %d round(s), want at least 2", n, p.Rounds)
	}
	// What the engine wrote is known exactly; what the guest CPU stored
	// through the aperture only content shows: the sampling pre-filter,
	// the full hash, or (when it runs) the background re-hash.
	content := s.BySource[dirty.Sample] + s.BySource[dirty.Hash]
	if opts.BackgroundRate > 0 {
		content += s.BySource[dirty.Background]
	}
	if content == 0 {
		t.Errorf("migration %d (%s): the stop found no page by its content (dirty by source %v)", n, opts.Strategy, s.BySource)
	}
}
