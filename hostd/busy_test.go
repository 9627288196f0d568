package hostd

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/vgpu"
)

// deleteVGPU is `gmigd vgpu rm NAME` through h's control API: the status
// and the error it answers.
func deleteVGPU(h *Host, name string) (int, string) {
	rec := httptest.NewRecorder()
	h.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodDelete, "/v1/vgpus/"+name, nil))
	return rec.Code, rec.Body.String()
}

// TestDestroyRefusedWhileMigrating: removing a vGPU in a migration is
// refused on both sides, 409 with why — on the source while its memory is
// pre-copied, on the destination while it is received — and the migration
// goes on to its end: the VM and its vGPU run at the destination and the
// guest's workload completes. (The remove used to be accepted and unmap
// the memory under the stream: gmigd died of SIGSEGV.)
func TestDestroyRefusedWhileMigrating(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sims := &sim.Registry{}
	src, dst := newMigHost(t, ctx, sims, false), newMigHost(t, ctx, sims, true)
	vm, _, done := startSimVM(t, ctx, src, sims, 8<<20)
	release := midWorkload(t, ctx, vm, 40)
	var (
		mu    sync.Mutex
		tried bool
		codes [2]int
		why   [2]string
		errs  [2]error
	)
	rep, err := src.MigrateVM(ctx, "vm", dst.addr, MigrateOptions{Progress: func(p orchestrator.Progress) {
		if p.Phase == orchestrator.PhaseVGPULive {
			mu.Lock()
			if !tried {
				tried = true
				for i, h := range []*migHost{src, dst} {
					codes[i], why[i] = deleteVGPU(h.Host, "vm")
					errs[i] = h.Destroy("vm")
				}
			}
			mu.Unlock()
		}
		release(p)
	}})
	if err != nil {
		t.Fatalf("the migration: %v", err)
	}
	if a := <-dst.arrivals; a.Err != nil {
		t.Fatalf("the destination says %v", a.Err)
	}
	mu.Lock()
	defer mu.Unlock()
	if !tried {
		t.Fatal("the migration never reported its vGPU live phase")
	}
	for i, side := range []string{"source", "destination"} {
		want := []string{"migrating", "arriving"}[i]
		if codes[i] != http.StatusConflict || !strings.Contains(why[i], want) {
			t.Errorf("vgpu rm on the %s during the migration: %d %s, want 409 saying %q", side, codes[i], why[i], want)
		}
		if !errors.Is(errs[i], ErrBusy) {
			t.Errorf("Destroy on the %s during the migration: %v, want ErrBusy", side, errs[i])
		}
	}
	checkReport(t, rep)
	if gi, err := dst.Get("vm"); err != nil || gi.State != stateLive {
		t.Fatalf("the destination's vGPU after the migration: %+v, %v", gi, err)
	}
	if _, err := src.Get("vm"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("the source still has the vGPU after the migration (%v)", err)
	}
	vm.Pace(0)
	if err := <-done; err != nil {
		t.Fatalf("workload: %v", err)
	}
}

// TestDestroyRefusedWhileVMUses: a vGPU a VM uses is not removed (409,
// naming the VM; its socket and memory stay); once the VM is stopped it
// is.
func TestDestroyRefusedWhileVMUses(t *testing.T) {
	h := newHost(t)
	info, err := h.Create(vgpu.Config{Name: "g", MemSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.AddSimVM("vm1", "g", new(sim.VM), nil); err != nil {
		t.Fatal(err)
	}
	if err := h.Destroy("g"); !errors.Is(err, ErrBusy) || !strings.Contains(err.Error(), "vm1") {
		t.Fatalf("Destroy of a VM's vGPU: %v, want ErrBusy naming vm1", err)
	}
	if code, why := deleteVGPU(h, "g"); code != http.StatusConflict || !strings.Contains(why, "vm1") {
		t.Fatalf("vgpu rm of a VM's vGPU: %d %s, want 409 naming vm1", code, why)
	}
	if _, err := h.Get("g"); err != nil {
		t.Fatalf("the refused vGPU: %v", err)
	}
	if _, err := os.Stat(info.Socket); err != nil {
		t.Fatalf("the refused vGPU's socket: %v", err)
	}
	if n := len(h.Pool().Partitions()); n != 1 {
		t.Fatalf("%d partitions after the refusal, want 1", n)
	}
	if err := h.StopVM("vm1"); err != nil {
		t.Fatal(err)
	}
	if err := h.Destroy("g"); err != nil {
		t.Fatalf("Destroy once the VM is stopped: %v", err)
	}
}
