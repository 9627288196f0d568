package migtest

import (
	"context"
	"testing"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/internal/sim"
)

// The migration tests' guest is the simulator's VM (sim.VM): a driver on
// a simulator bus attached to a served vGPU and a seeded workload whose
// progress a test can watch (Mark, Since, Await) and which it can hold at
// an operation boundary (HoldAfter), as a VM stop freezes a guest
// wherever it is. These helpers make one for a test.

// Attach attaches a guest to s: a simulator bus with opts and a driver
// whose GTT permutation is seeded with gttSeed, closed with the test.
func Attach(t testing.TB, s *Served, gttSeed int64, opts sim.Options) *sim.VM {
	t.Helper()
	vm, err := sim.NewVM(s.Path, gttSeed, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { vm.Close() })
	return vm
}

// StartVM attaches a guest to s (Attach, INTx) and starts steps steps of
// the workload of seed and cfg on a goroutine of its own.
func StartVM(ctx context.Context, t testing.TB, s *Served, gttSeed, seed int64, steps int, cfg guest.WorkloadConfig) *sim.VM {
	t.Helper()
	vm := Attach(t, s, gttSeed, sim.Options{})
	if err := vm.SetWorkload(seed, cfg); err != nil {
		t.Fatal(err)
	}
	if err := vm.Start(ctx, steps); err != nil {
		t.Fatal(err)
	}
	return vm
}

// MoveTo re-attaches the (paused) guest to s keeping its RAM and rebinds
// its driver, as a migration's destination QEMU does once s's vGPU holds
// the migrated state. Each move switches between INTx and MSI, so both
// interrupt paths cross migrations.
func MoveTo(t testing.TB, vm *sim.VM, s *Served) {
	t.Helper()
	_, rebind, err := vm.MoveTo(s.Path, sim.Options{MSI: !vm.Bus().Options().MSI})
	if err != nil {
		t.Fatal(err)
	}
	if err := rebind(); err != nil {
		t.Fatal(err)
	}
}

// Digest is the workload's graphics-memory digest.
func Digest(t testing.TB, vm *sim.VM) [32]byte {
	t.Helper()
	sum, err := vm.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// Reference runs steps steps of the workload of seed and cfg (without its
// checks) on a vGPU of mem bytes in p that never migrates, and returns its
// digest.
func Reference(ctx context.Context, t testing.TB, p *pool.Pool, seed int64, steps int, mem uint64, cfg guest.WorkloadConfig) [32]byte {
	t.Helper()
	s := ServeNew(t, p, "reference", mem)
	defer s.Close()
	cfg.Check = false
	vm := StartVM(ctx, t, s, seed+1, seed, steps, cfg)
	if err := vm.Wait(); err != nil {
		t.Fatalf("reference run: %v", err)
	}
	return Digest(t, vm)
}
