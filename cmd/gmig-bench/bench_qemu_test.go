package main

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/internal/cluster"
)

// TestQEMUBenchDaemonsOnGPUHost: the real-VM bench's two daemons both
// come up on a host with a GPU (the CUDA model, which both see); with the
// per-GPU lock the second found the GPU owned by the first and stopped.
func TestQEMUBenchDaemonsOnGPUHost(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs gmigd")
	}
	bin := filepath.Join(t.TempDir(), "gmigd")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/gmig-dev/gmig/cmd/gmigd").CombinedOutput(); err != nil {
		t.Fatalf("building gmigd: %v\n%s", err, out)
	}
	t.Setenv(nvidia.ModelEnv, "1")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	for _, name := range []string{"a", "b"} {
		d, err := cluster.Start(ctx, dir, name, benchDaemonOptions(bin, "", "16M", "info"))
		if err != nil {
			t.Fatalf("gmigd %s: %v", name, err)
		}
		t.Cleanup(func() { d.Stop(10 * time.Second) })
	}
}
