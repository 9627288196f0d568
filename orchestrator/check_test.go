package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// checkHost is a fakeHost that checks: room in its pool, unless refuse.
type checkHost struct{ *fakeHost }

func (h checkHost) Check(_ context.Context, p Prepare) []CheckItem {
	var used uint64
	for _, pt := range h.pool.Partitions() {
		used += pt.Size
	}
	free := h.pool.Size() - used
	items := []CheckItem{{What: "pool", OK: p.VGPU.MemSize <= free, Detail: fmt.Sprintf("%d of %d bytes free", free, p.VGPU.MemSize)}}
	if h.refuse != nil {
		items = append(items, CheckItem{What: "vm", Detail: h.refuse.Error()})
	}
	return items
}

// startChecking starts the destination with a host that checks.
func startChecking(t *testing.T, e *env) {
	l, err := e.net.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dst := NewDestination(checkHost{e.first}, DestinationOptions{Timeouts: e.dstTimeouts, Log: e.log})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := dst.Serve(ctx, l); err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	e.addr = l.Addr().String()
}

func TestDryRunPasses(t *testing.T) {
	e := newEnv(t, Timeouts{})
	startChecking(t, e)
	rep, err := Check(e.ctx, e.source(Timeouts{}))
	if err != nil {
		t.Fatalf("Check: %v", err)
	}
	t.Log(rep)
	if !rep.OK || len(rep.Items) != 1 || rep.Items[0].What != "pool" || !rep.Items[0].OK {
		t.Errorf("report %+v", rep)
	}
	if rep.Estimate.Link <= 0 || rep.Estimate.Total <= 0 {
		t.Errorf("estimate %+v", rep.Estimate)
	}
	if n := e.first.Lands(); n != 0 || len(e.dstPool.Partitions()) != 0 {
		t.Errorf("the dry run landed %d, the pool holds %v", n, e.dstPool.Partitions())
	}
	if e.vm.n("Migrate", false) != 0 || e.vm.State() != vmRunning {
		t.Error("the dry run touched the VM")
	}
}

func TestDryRunFails(t *testing.T) {
	e := newEnv(t, Timeouts{})
	e.first.refuse = errors.New("QEMU lacks machine type q35")
	startChecking(t, e)
	rep, err := Check(e.ctx, e.source(Timeouts{}))
	if !errors.Is(err, ErrCheckFailed) || !strings.Contains(err.Error(), "vm: QEMU lacks machine type q35") {
		t.Fatalf("Check: %v, want ErrCheckFailed naming the failed item", err)
	}
	if rep.OK || !strings.Contains(rep.String(), "FAIL vm") {
		t.Errorf("report %s", rep)
	}
	if n := e.first.Lands(); n != 0 {
		t.Errorf("the dry run landed %d", n)
	}
}

// A destination whose host cannot check says so: the dry run fails.
func TestDryRunWithoutChecker(t *testing.T) {
	e := newEnv(t, Timeouts{})
	e.start()
	_, err := Check(e.ctx, e.source(Timeouts{}))
	if !errors.Is(err, ErrCheckFailed) || !strings.Contains(err.Error(), "cannot check") {
		t.Fatalf("Check: %v", err)
	}
}
