package hostd

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/vgpu"
)

// The load test (docs/testing.md, "Load and soak"): one gmigd with
// loadVMs simulated vGPUs running checked workloads at once, and
// loadInFlight migrations at a time between it and a second gmigd.

var soakFlag = flag.Duration("soak", 0, "run TestSoak for this long (or set GMIG_SOAK)")

const (
	loadVMs      = 16
	loadInFlight = 4
	loadSeeds    = 4       // VM i runs seed 1 + i%loadSeeds: each seed's VMs must end alike
	loadVGPUMem  = 4 << 20 // each vGPU; the workload uses 1 MiB of it
	loadPool     = (loadVMs + loadInFlight + 2) * loadVGPUMem
)

// Soak bounds, checked between a sample taken once every VM has migrated
// (caches, pools and buffers warmed up) and the last one, each taken with
// no migration in flight after a GC: open descriptors may grow by
// soakFDSlack, goroutines by soakGoroutineSlack, the live heap by
// soakHeapFactor plus soakHeapSlack.
const (
	soakFDSlack        = 8
	soakGoroutineSlack = 16
	soakHeapFactor     = 1.25
	soakHeapSlack      = 16 << 20
	soakSample         = 30 * time.Second
)

var loadWorkload = guest.WorkloadConfig{MemSize: 1 << 20, Check: true}

// loadVM is one simulated VM of the load test.
type loadVM struct {
	name string
	seed int64
	vm   *sim.VM
	on   int // the host it runs on; its migration worker's alone
}

// loadRig is two gmigd, sixteen VMs on the first and their workloads.
type loadRig struct {
	t     *testing.T
	hosts [2]*migHost
	vms   []*loadVM
	moves atomic.Int64
	fails atomic.Int64 // migrations that rolled back (the VM ran on)
}

func newLoadRig(t *testing.T, ctx context.Context) *loadRig {
	sims := &sim.Registry{}
	r := &loadRig{t: t}
	for i := range r.hosts {
		r.hosts[i] = newMigHostWith(t, ctx, i == 1, Config{Sims: sims, PoolSize: loadPool})
	}
	for i := range loadVMs {
		name := fmt.Sprintf("vm%02d", i)
		info, err := r.hosts[0].Create(vgpu.Config{Name: name, MemSize: loadVGPUMem})
		if err != nil {
			t.Fatal(err)
		}
		seed := int64(1 + i%loadSeeds)
		vm, err := sim.StartVM(info.Socket, seed, loadWorkload, sim.Options{MSI: true, RAMSize: 4 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { vm.Close() })
		if err := r.hosts[0].AddSimVM(name, name, vm, nil); err != nil {
			t.Fatal(err)
		}
		sims.Put(name, vm)
		r.vms = append(r.vms, &loadVM{name: name, seed: seed, vm: vm})
	}
	return r
}

// migrate moves v to the other host; a roll-back leaves it running here.
func (r *loadRig) migrate(ctx context.Context, v *loadVM) error {
	from, to := r.hosts[v.on], r.hosts[1-v.on]
	_, err := from.MigrateVM(ctx, v.name, to.addr, MigrateOptions{})
	switch {
	case err == nil:
		if a := <-to.arrivals; a.Err != nil {
			return fmt.Errorf("%s: the destination says %w", v.name, a.Err)
		}
		v.on = 1 - v.on
		r.moves.Add(1)
		return nil
	case ctx.Err() == nil && errors.Is(err, orchestrator.ErrRolledBack):
		r.fails.Add(1)
		return nil
	}
	return fmt.Errorf("migrating %s: %w", v.name, err)
}

// workloads runs every VM's workload, steps steps each (0: until stop
// closes, in chunks), and returns a channel with the first error once all
// have ended.
func (r *loadRig) workloads(ctx context.Context, steps int, stop <-chan struct{}) <-chan error {
	out := make(chan error, 1)
	errs := make(chan error, len(r.vms))
	for _, v := range r.vms {
		go func() {
			if steps > 0 {
				errs <- v.vm.Run(ctx, steps)
				return
			}
			for {
				select {
				case <-stop:
					errs <- nil
					return
				default:
				}
				if err := v.vm.Run(ctx, 5); err != nil {
					errs <- fmt.Errorf("%s: %w", v.name, err)
					return
				}
			}
		}()
	}
	go func() {
		var first error
		for range r.vms {
			if err := <-errs; err != nil && first == nil {
				first = err
			}
		}
		out <- first
	}()
	return out
}

// checkDigests checks every VM's graphics memory against its workload's
// reference model (Digest fails on a difference) and that the VMs of one
// seed that ran the same steps have the same digest; want, if set, is
// each seed's never-migrated digest.
func (r *loadRig) checkDigests(want map[int64][32]byte) {
	r.t.Helper()
	type key struct {
		seed  int64
		steps uint64
	}
	seen := map[key][32]byte{}
	for _, v := range r.vms {
		sum, err := v.vm.Digest()
		if err != nil {
			r.t.Errorf("%s: %v", v.name, err)
			continue
		}
		k := key{v.seed, v.vm.Workload().Steps()}
		if s, ok := seen[k]; ok && s != sum {
			r.t.Errorf("%s: digest %x after %d steps, another VM of seed %d has %x", v.name, sum[:8], k.steps, v.seed, s[:8])
		}
		seen[k] = sum
		if w, ok := want[v.seed]; ok && w != sum {
			r.t.Errorf("%s: digest %x, never migrated %x", v.name, sum[:8], w[:8])
		}
	}
}

// TestLoad runs sixteen vGPUs' checked workloads at once in one gmigd and
// migrates every VM to a second gmigd, four migrations in flight at a
// time, in the middle of the workloads; then half of them back. Every
// VM's digest equals its seed's never-migrated run.
func TestLoad(t *testing.T) {
	steps := 120
	if raceEnabled {
		steps = 40
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	r := newLoadRig(t, ctx)
	start := time.Now()
	done := r.workloads(ctx, steps, nil)
	var wg sync.WaitGroup
	errs := make(chan error, loadInFlight)
	for w := range loadInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < loadVMs; i += loadInFlight {
				v := r.vms[i]
				if err := v.vm.WaitStep(ctx, 3); err != nil {
					errs <- err
					return
				}
				if err := r.migrate(ctx, v); err != nil {
					errs <- err
					return
				}
			}
			// Half of them back, while the others' workloads go on.
			if v := r.vms[w]; v.on == 1 {
				if err := r.migrate(ctx, v); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("workloads: %v", err)
	}
	elapsed := time.Since(start)
	want := map[int64][32]byte{}
	for s := int64(1); s <= loadSeeds; s++ {
		want[s] = referenceOn(t, ctx, r.hosts[1].Host, "ref", s, steps, loadWorkload)
	}
	r.checkDigests(want)
	t.Logf("%d VMs × %d steps with %d migrations (%d rolled back), %d in flight at a time, in %s",
		loadVMs, steps, r.moves.Load(), r.fails.Load(), loadInFlight, elapsed.Round(time.Millisecond))
	if r.moves.Load() < loadVMs {
		t.Errorf("%d migrations completed, want at least %d", r.moves.Load(), loadVMs)
	}
}
