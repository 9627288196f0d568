package hostd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/vgpu"
)

// useModelGPUs makes this test's CUDA back end n model GPUs.
func useModelGPUs(t *testing.T, n int) { t.Setenv(nvidia.ModelEnv, fmt.Sprint(n)) }

// vgpuGPU is the UUID of the GPU vGPU name of h runs on ("" for none).
func vgpuGPU(t *testing.T, h *Host, name string) string {
	t.Helper()
	v, err := h.VGPU(name)
	if err != nil {
		t.Fatal(err)
	}
	if v.GPU() == nil {
		return ""
	}
	return v.GPU().Info().UUID
}

// TestGPUChoice: -gpu picks the GPU cuda vGPUs run on, by index or by
// UUID (either case); the default is CUDA's first; a GPU that is not
// there fails start-up naming those that are; none refuses cuda vGPUs
// (503 through the API) and keeps software ones.
func TestGPUChoice(t *testing.T) {
	useModelGPUs(t, 2)
	for _, c := range []struct{ sel, want string }{
		{"", nvidia.ModelUUID(0)},
		{"1", nvidia.ModelUUID(1)},
		{"0", nvidia.ModelUUID(0)},
		{nvidia.ModelUUID(1), nvidia.ModelUUID(1)},
		{strings.ToUpper(nvidia.ModelUUID(0)), nvidia.ModelUUID(0)},
	} {
		h := newHostWith(t, Config{GPU: c.sel})
		if r := h.GPUs(); r.Chosen == nil || r.Chosen.UUID != c.want || r.Source != "model" || len(r.GPUs) != 2 {
			t.Fatalf("-gpu %q: %+v, want %s chosen of 2 model GPUs", c.sel, r, c.want)
		}
		info, err := h.Create(vgpu.Config{Name: "g", MemSize: 1 << 20, Backend: vgpu.BackendCUDA})
		if err != nil {
			t.Fatal(err)
		}
		if got := vgpuGPU(t, h, "g"); got != c.want || info.GPU != c.want {
			t.Fatalf("-gpu %q: the cuda vGPU runs on %s (listed on %q), want %s", c.sel, got, info.GPU, c.want)
		}
		h.Close()
	}
	for _, sel := range []string{"2", "GPU-00000000-0000-0000-0000-000000000000"} {
		h, err := New(Config{PoolSize: 16 << 20, RunDir: t.TempDir(), Log: zerolog.Nop(), GPU: sel})
		if err == nil {
			h.Close()
			t.Fatalf("-gpu %s started on a host of 2 GPUs", sel)
		}
		if !errors.Is(err, ErrNoGPU) || !strings.Contains(err.Error(), nvidia.ModelUUID(0)) || !strings.Contains(err.Error(), nvidia.ModelUUID(1)) {
			t.Fatalf("-gpu %s: %v, want ErrNoGPU naming both GPUs", sel, err)
		}
		t.Logf("refused: %v", err)
	}
	h := newHostWith(t, Config{GPU: GPUNone})
	c, _ := serveAPI(t, h)
	if r := h.GPUs(); r.Chosen != nil {
		t.Fatalf("-gpu none chose %+v", r.Chosen)
	}
	_, err := c.Create(CreateRequest{Name: "g", MemSize: 1 << 20, Backend: vgpu.BackendCUDA})
	if err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "-gpu none") {
		t.Fatalf("a cuda vGPU on a gmigd without a GPU: %v, want 503 saying -gpu none", err)
	}
	if _, err := c.Create(CreateRequest{Name: "s", MemSize: 1 << 20}); err != nil {
		t.Fatalf("a software vGPU on a gmigd without a GPU: %v", err)
	}
}

// TestGPULock: two gmigd with the same lock directory never own one GPU:
// the second fails naming the first's run dir and pid, whether it asks
// by index or by UUID; another GPU is free to it; the owners show in the
// listing and the control API; once the first has shut down its GPU is
// free again.
func TestGPULock(t *testing.T) {
	useModelGPUs(t, 2)
	locks := t.TempDir()
	a := newHostWith(t, Config{GPU: "0", GPULockDir: locks})
	for _, sel := range []string{"0", nvidia.ModelUUID(0), ""} {
		dir := t.TempDir()
		b, err := New(Config{PoolSize: 16 << 20, RunDir: dir, Log: zerolog.Nop(), GPU: sel, GPULockDir: locks})
		if err == nil {
			b.Close()
			t.Fatalf("-gpu %q: a second gmigd took GPU 0", sel)
		}
		want := fmt.Sprintf("(run dir %s, pid %d)", a.cfg.RunDir, os.Getpid())
		if !errors.Is(err, ErrGPUInUse) || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), nvidia.ModelUUID(0)) {
			t.Fatalf("-gpu %q: %v, want ErrGPUInUse saying %q", sel, err, want)
		}
		if _, err := os.Stat(dir + "/gmigd.lock"); err != nil {
			t.Fatal(err)
		}
	}
	b := newHostWith(t, Config{GPU: "1", GPULockDir: locks})
	c, _ := serveAPI(t, b)
	r, err := c.GPUs()
	if err != nil {
		t.Fatal(err)
	}
	if r.Chosen == nil || r.Chosen.UUID != nvidia.ModelUUID(1) || len(r.GPUs) != 2 || r.LockDir != locks {
		t.Fatalf("GET /v1/gpus: %+v", r)
	}
	for i, h := range []*Host{a, b} {
		if o := r.GPUs[i].Owner; o == nil || o.RunDir != h.cfg.RunDir || o.PID != os.Getpid() {
			t.Fatalf("GPU %d's owner %+v, want run dir %s", i, o, h.cfg.RunDir)
		}
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if o := GPUs(locks).GPUs[0].Owner; o != nil {
		t.Fatalf("GPU 0 still owned by %+v after its gmigd shut down", o)
	}
	newHostWith(t, Config{GPU: nvidia.ModelUUID(0), GPULockDir: locks})
}

// TestMigrateCUDABetweenGPUs migrates a cuda vGPU between two gmigd bound
// to different (model) GPUs, 0 → 1 → 0, in the middle of a workload that
// checks every step: each time it lands on the destination's GPU, and the
// guest ends with the digest of a run that never moved.
func TestMigrateCUDABetweenGPUs(t *testing.T) {
	useModelGPUs(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sims := &sim.Registry{}
	hosts := []*migHost{
		newMigHostWith(t, ctx, true, Config{Sims: sims, GPU: "0"}),
		newMigHostWith(t, ctx, false, Config{Sims: sims, GPU: nvidia.ModelUUID(1)}),
	}
	gpus := []string{nvidia.ModelUUID(0), nvidia.ModelUUID(1)}
	wcfg := guest.WorkloadConfig{MemSize: 2 << 20, Check: true}
	cfg := vgpu.Config{Name: "vm", MemSize: 8 << 20, Backend: vgpu.BackendCUDA}
	info, err := hosts[0].Create(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if got := vgpuGPU(t, hosts[0].Host, "vm"); got != gpus[0] {
		t.Fatalf("created on %s, want %s", got, gpus[0])
	}
	vm, err := sim.StartVM(info.Socket, testSeed, wcfg, sim.Options{MSI: true})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	if err := hosts[0].AddSimVM("vm", "vm", vm, nil); err != nil {
		t.Fatal(err)
	}
	sims.Put("vm", vm)
	stopBeat := vm.StartHeartbeat(time.Millisecond)
	defer stopBeat()
	done := make(chan error, 1)
	go func() { done <- vm.Run(ctx, testSteps) }()
	for i := range 2 {
		from, to := hosts[i%2], hosts[(i+1)%2]
		rep, err := from.MigrateVM(ctx, "vm", to.addr, MigrateOptions{Progress: midWorkload(t, ctx, vm, uint64(60*(i+1)))})
		if err != nil {
			t.Fatalf("migration %d: %v", i, err)
		}
		if a := <-to.arrivals; a.Err != nil {
			t.Fatalf("migration %d: the destination says %v", i, a.Err)
		}
		checkReport(t, rep)
		if got, want := vgpuGPU(t, to.Host, "vm"), gpus[(i+1)%2]; got != want {
			t.Fatalf("migration %d landed on GPU %s, want the destination's %s", i, got, want)
		}
		t.Logf("migration %d: GPU %s → %s, downtime %.2f ms", i, gpus[i%2], gpus[(i+1)%2], ms(rep.Downtime))
	}
	vm.Pace(0)
	if err := <-done; err != nil {
		t.Fatalf("workload: %v", err)
	}
	got, err := vm.Digest()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Name = "ref"
	ref, err := hosts[1].Create(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rvm, err := sim.StartVM(ref.Socket, testSeed, wcfg, sim.Options{MSI: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rvm.Close()
	if err := rvm.Run(ctx, testSteps); err != nil {
		t.Fatal(err)
	}
	want, err := rvm.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("digest after 0 → 1 → 0 %x, never migrated %x", got, want)
	}
}
