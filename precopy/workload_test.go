package precopy

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/internal/pool"
)

// migrateVM migrates the guest m, running on from, to a new vGPU in to:
// the pre-copy runs while the workload does, the guest is paused after
// countdown more operations (before or after the pre-copy ends, as a VM
// stop may come; a guest without a workload counts as paused), Stop and Receive complete, the guest is re-attached to
// the destination keeping its RAM, the destination vGPU resumes, the
// source vGPU is destroyed and the guest goes on.
func migrateVM(ctx context.Context, t *testing.T, m *vm, from *served, to *pool.Pool, name string, opts Options, countdown int) (*served, Report) {
	t.Helper()
	a, b := tcpPair(t)
	recv := receive(ctx, b, to, name, nil)
	s, err := NewSource(from.v, a, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	paused, resume := m.gate.pauseAfter(countdown)
	defer resume()
	if err := s.Precopy(ctx); err != nil {
		t.Fatalf("%s: pre-copy: %v", name, err)
	}
	if m.w != nil {
		select {
		case <-paused:
		case err := <-m.done:
			t.Fatalf("%s: the workload ended before the pause (%v): give it more steps", name, err)
		}
	}
	rep, err := s.Stop(ctx)
	if err != nil {
		t.Fatalf("%s: stop: %v", name, err)
	}
	r := <-recv
	if r.err != nil {
		t.Fatalf("%s: receive: %v", name, r.err)
	}
	next := serve(t, r.v)
	m.moveTo(next)
	r.v.Resume()
	from.close()
	return next, rep
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
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rng := rand.New(rand.NewPCG(seed, 9))
	hosts := [2]*pool.Pool{newPool(t, 4*mem), newPool(t, 4*mem)}
	_ = newVGPU(t, hosts[0], "filler", 1<<20) // host 0's partitions start elsewhere than host 1's
	cur := serveNew(t, hosts[0], "g0", mem)
	m := startVM(ctx, t, cur, 1, seed, steps, true)
	for i := range migrations {
		opts := Options{Strategy: Strategies[i%len(Strategies)], Workers: 2, Log: testLog}
		if opts.Strategy == OneShot && i >= len(Strategies) {
			opts.BackgroundRate = 100000
		}
		from := cur.v.Partition().Offset
		var rep Report
		cur, rep = migrateVM(ctx, t, m, cur, hosts[(i+1)%2], fmt.Sprintf("g%d", i+1), opts, 10+rng.IntN(60))
		t.Logf("migration %d (%s, pool offset %#x -> %#x, guest at step %d):\n%s",
			i+1, opts.Strategy, from, cur.v.Partition().Offset, m.gate.pausedAt(), rep)
	}
	if err := <-m.done; err != nil {
		t.Fatalf("workload after %d migrations: %v", migrations, err)
	}
	got := m.digest()
	if want := reference(ctx, t, hosts[0], seed, steps, mem); got != want {
		t.Fatalf("digest after %d migrations %x, never migrated %x", migrations, got, want)
	}
}
