package precopy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/internal/vgpu"
)

// hop is one migration of a guest's vGPU (migrateVM).
type hop struct {
	name string
	opts Options
	// After the pre-copy, the guest pauses once it has passed countdown
	// more operation boundaries.
	countdown int
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
func migrateVM(ctx context.Context, t *testing.T, m *migtest.VM, from *migtest.Served, to *pool.Pool, h hop) (*migtest.Served, Report, migtest.Progress) {
	t.Helper()
	cfg := from.V.Config()
	cfg.Name = h.name
	v, err := vgpu.New(cfg, to, migtest.Log)
	if err != nil {
		t.Fatal(err)
	}
	next := migtest.Serve(t, v)
	a, b := migtest.TCPPair(t)
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
	paused, resume := m.PauseAfter(h.countdown, nil)
	defer resume()
	if m.W != nil {
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
	m.MoveTo(next)
	v.Resume()
	from.Close()
	return next, rep, during
}

// TestMigrateUnderWorkload is issue 4's evidence: a guest runs a seeded,
// self-checking workload continuously while its vGPU migrates back and
// forth between two hosts' pools nine times, at random operation
// boundaries, with every strategy; the workload checks graphics memory
// against its model after every step, and its final digest equals that of
// a run of the same seed that was never migrated.
func TestMigrateUnderWorkload(t *testing.T) {
	const (
		mem        = 16 << 20
		steps      = 200
		migrations = 9
		seed       = 4242
	)
	wcfg := guest.WorkloadConfig{Check: true}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(seed, 9))
	hosts := [2]*pool.Pool{migtest.NewPool(t, 4*mem), migtest.NewPool(t, 4*mem)}
	_ = migtest.NewVGPU(t, hosts[0], "filler", 1<<20) // host 0's partitions start elsewhere than host 1's
	cur := migtest.ServeNew(t, hosts[0], "g0", mem)
	m := migtest.StartVM(ctx, t, cur, 1, seed, steps, wcfg)
	for i := range migrations {
		opts := Options{Strategy: Strategies[i%len(Strategies)], Workers: 2, Log: migtest.Log}
		if opts.Strategy == OneShot && i >= len(Strategies) {
			opts.BackgroundRate = 100000
		}
		from := cur.V.Partition().Offset
		var rep Report
		cur, rep, _ = migrateVM(ctx, t, m, cur, hosts[(i+1)%2], hop{name: fmt.Sprintf("g%d", i+1), opts: opts, countdown: 10 + rng.IntN(60)})
		t.Logf("migration %d (%s, pool offset %#x -> %#x, guest at step %d):\n%s",
			i+1, opts.Strategy, from, cur.V.Partition().Offset, m.PausedAt(), rep)
	}
	if err := m.Wait(); err != nil {
		t.Fatalf("workload after %d migrations: %v", migrations, err)
	}
	got := m.Digest()
	if want := migtest.Reference(ctx, t, hosts[0], seed, steps, mem, wcfg); got != want {
		t.Fatalf("digest after %d migrations %x, never migrated %x", migrations, got, want)
	}
}
