package sim

import (
	"context"
	"testing"

	"github.com/gmig-dev/gmig/guest"
)

// TestHoldAfterAndSince: a hold armed with a condition on the progress
// made since it was armed parks the workload at the first boundary where
// the condition holds (no sooner than the count asked), Since reports that
// progress, StoppedAt the step, and Resume lets the workload finish.
func TestHoldAfterAndSince(t *testing.T) {
	ctx := context.Background()
	d := serve(t, newPool(t, 16<<20), "g", 4<<20)
	vm, err := NewVM(d.path, 1, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	if err := vm.SetWorkload(5, guest.WorkloadConfig{MemSize: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	mark := vm.Mark()
	held, err := vm.HoldAfter(4, func(p Progress) bool { return p.Steps >= 3 })
	if err != nil {
		t.Fatal(err)
	}
	if _, err := vm.HoldAfter(1, nil); err == nil {
		t.Fatal("a second hold was armed over the first")
	}
	if err := vm.Start(ctx, 20); err != nil {
		t.Fatal(err)
	}
	select {
	case <-held:
	case <-vm.Finished():
		t.Fatalf("the workload ended (%v) without holding", vm.Wait())
	}
	p := vm.Since(mark)
	if p.Steps < 3 || p.Total() < 4 {
		t.Fatalf("held after %v, want at least 3 steps and 4 operations", p)
	}
	if got := vm.StoppedAt(); got != p.Steps {
		t.Errorf("StoppedAt %d, Since says %d steps", got, p.Steps)
	}
	if err := vm.Await(ctx, mark, func(q Progress) bool { return q.Steps >= 3 }); err != nil {
		t.Fatal(err)
	}
	vm.Resume()
	if err := vm.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := vm.Workload().Steps(); got != 20 {
		t.Errorf("%d steps at the end, want 20", got)
	}
}
