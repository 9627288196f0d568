package sim

import (
	"context"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/guest"
)

// victimRun attaches a VM with the seeded, self-checking workload to dev.
func victimRun(ctx context.Context, t *testing.T, dev *device, seed int64) *VM {
	t.Helper()
	vm, err := StartVM(dev.path, seed, guest.WorkloadConfig{Check: true}, Options{MSI: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Close() })
	return vm
}

func vmDigest(t *testing.T, vm *VM) [32]byte {
	t.Helper()
	sum, err := vm.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// TestHostileNeighbour runs a seeded workload on vGPU b while a hostile
// client of vGPU a, in the same pool, attacks continuously: it writes past
// its aperture through a mapping of its descriptor over the pool's whole
// length, tries to resize the descriptor, writes GTT entries naming pages
// outside its partition, and submits out-of-range DMA, unmapped graphics
// addresses and garbage. Every attempt is refused, a's vGPU keeps serving
// it, and b's digest equals the same seed's run on a pool of its own.
func TestHostileNeighbour(t *testing.T) {
	const (
		seed     = 4242
		poolSize = 32 << 20
		aMem     = 4 << 20
		bMem     = 8 << 20
		steps    = workloadSteps / 2
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	alone := victimRun(ctx, t, serve(t, newPool(t, poolSize), "alone", bMem), seed)
	if err := alone.Run(ctx, steps); err != nil {
		t.Fatal(err)
	}
	want := vmDigest(t, alone)

	p := newPool(t, poolSize)
	a := serve(t, p, "hostile", aMem)
	b := serve(t, p, "victim", bMem)
	h := newHostile(t, a, poolSize)

	h.round(ctx, t) // before the victim starts
	victim := victimRun(ctx, t, b, seed)
	stop, done := make(chan struct{}), make(chan int)
	go func() {
		rounds := 0
		for {
			select {
			case <-stop:
				done <- rounds
				return
			default:
			}
			h.round(ctx, t)
			rounds++
		}
	}()
	err := victim.Run(ctx, steps)
	close(stop)
	rounds := <-done
	if err != nil {
		t.Fatalf("victim workload beside a hostile neighbour: %v", err)
	}
	h.round(ctx, t) // after it finished, before its digest is taken
	if got := vmDigest(t, victim); got != want {
		t.Errorf("victim digest %x beside a hostile neighbour, %x alone", got[:8], want[:8])
	}
	st := a.v.Stats()
	t.Logf("%d hostile rounds during the workload, %d attempts refused, %d engine faults on a", rounds+2, h.refused, st.Faults)
	if st.Faults == 0 {
		t.Error("the hostile's bad commands were not counted as faults")
	}
}
