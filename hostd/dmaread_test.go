package hostd

import (
	"context"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/vgpu"
)

// TestMigrateBetweenDMAReadAndCheck migrates a simulated VM stopped right
// after a DMA_FROM_GFX whose result its checked workload compares only at
// the step's end, after the move: the check must read guest RAM through
// the destination's mapping. (It read a slice of the source's mapping of
// guest RAM, which the move unmaps: the process died of SIGSEGV.)
func TestMigrateBetweenDMAReadAndCheck(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const seed = 21
	cfg := guest.WorkloadConfig{MemSize: 1 << 20, Check: true}
	// The trace: the first steps with a DMA_FROM_GFX in them.
	plan, err := guest.NewWorkload(seed, cfg)
	if err != nil {
		t.Fatal(err)
	}
	type point struct {
		step uint64
		op   int
	}
	var points []point
	for s := uint64(0); len(points) < 4 && s < 200; s++ {
		for j, op := range plan.Next() {
			if op.Kind == guest.OpDMAFrom && s > 0 {
				points = append(points, point{s, j + 2}) // the boundary after it
				break
			}
		}
	}
	if len(points) == 0 {
		t.Fatal("no DMA_FROM_GFX in the workload's first steps")
	}
	sims := &sim.Registry{}
	hosts := [2]*migHost{newMigHost(t, ctx, sims, false), newMigHost(t, ctx, sims, true)}
	var last uint64
	for i, p := range points {
		from, to := hosts[i%2], hosts[(i+1)%2]
		name := "vm"
		var vm *sim.VM
		if i == 0 {
			info, err := from.Create(vgpu.Config{Name: name, MemSize: 4 << 20})
			if err != nil {
				t.Fatal(err)
			}
			if vm, err = sim.StartVM(info.Socket, seed, cfg, sim.Options{MSI: true, RAMSize: 4 << 20}); err != nil {
				t.Fatal(err)
			}
			defer vm.Close()
			sims.Put(name, vm)
		}
		vm, _ = sims.Get(name)
		held, err := vm.HoldAt(p.step, p.op)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			if err := from.AddSimVM(name, name, vm, nil); err != nil {
				t.Fatal(err)
			}
		}
		done := make(chan error, 1)
		go func() { done <- vm.Run(ctx, int(p.step+1-last)) }()
		<-held
		if _, err := from.MigrateVM(ctx, name, to.addr, MigrateOptions{}); err != nil {
			t.Fatalf("migration %d at step %d op %d: %v", i, p.step, p.op, err)
		}
		<-to.arrivals
		if err := <-done; err != nil {
			t.Fatalf("after migration %d: %v", i, err)
		}
		last = p.step + 1
	}
}
