package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/vgpu"
)

// TestBackendFlagsShareOneGPU: on a host with a GPU (the CUDA model, which
// every daemon sees), two daemons with the per-GPU lock collide (the
// second stops: GPU owned by another gmigd), while two started with
// BackendFlags both come up: on the cuda back end both on the one GPU,
// on the software back end without a GPU.
func TestBackendFlagsShareOneGPU(t *testing.T) {
	bin := buildGmigd(t)
	t.Setenv(nvidia.ModelEnv, "1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := func(dir, name string, extra []string) (*Daemon, error) {
		d, err := Start(ctx, dir, name, Options{Binary: bin, Pool: "16M", Insecure: true, Extra: extra})
		if err == nil {
			t.Cleanup(func() { d.Stop(10 * time.Second) })
		}
		return d, err
	}
	// The collision, with a lock directory of this test's own.
	dir, locks := t.TempDir(), t.TempDir()
	if _, err := start(dir, "a", []string{"-gpu-lock-dir", locks}); err != nil {
		t.Fatal(err)
	}
	_, err := start(dir, "b", []string{"-gpu-lock-dir", locks})
	if err == nil || !strings.Contains(err.Error(), "owned by another gmigd") {
		t.Fatalf("a second daemon on a locked GPU: %v, want it to stop as the GPU is owned by another gmigd", err)
	}
	for _, backend := range []string{vgpu.BackendCUDA, vgpu.BackendSoftware} {
		dir := t.TempDir()
		for _, name := range []string{"a", "b"} {
			d, err := start(dir, name, BackendFlags(backend))
			if err != nil {
				t.Fatalf("%s: %v", backend, err)
			}
			r, err := d.Client.GPUs()
			if err != nil {
				t.Fatal(err)
			}
			cuda := backend == vgpu.BackendCUDA
			if onGPU := r.Chosen != nil; onGPU != cuda || cuda && r.LockDir != "" {
				t.Fatalf("%s: gmigd %s chose GPU %+v, lock directory %q", backend, name, r.Chosen, r.LockDir)
			}
		}
	}
}
