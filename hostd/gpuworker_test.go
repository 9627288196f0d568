package hostd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/engine/nvidia/gpuproc"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/vgpu"
)

// TestGPUWorkerKilled: two cuda vGPUs of one gmigd, each with its GPU
// worker (isolation "process", the default, shown in their info). A's
// worker is killed: A's next commands fail, answering 719 on their stream;
// gmigd logs one line naming A and the signal and runs on; B keeps running
// commands; destroying A leaves no process behind.
func TestGPUWorkerKilled(t *testing.T) {
	useModelGPUs(t, 1)
	var log lockedBuffer
	h, err := New(Config{PoolSize: 16 << 20, RunDir: t.TempDir(), Log: zerolog.New(&log)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	infos := map[string]Info{}
	drivers := map[string]*sim.VM{}
	for _, name := range []string{"a", "b"} {
		info, err := h.Create(vgpu.Config{Name: name, MemSize: 1 << 20, LocalMemSize: 64 << 10, Backend: vgpu.BackendCUDA})
		if err != nil {
			t.Fatal(err)
		}
		if info.GPUIsolation != vgpu.IsolationProcess || info.GPUWorkerPID == 0 {
			t.Fatalf("vGPU %s: isolation %q, worker pid %d; want a worker of its own", name, info.GPUIsolation, info.GPUWorkerPID)
		}
		vm, err := sim.NewVM(info.Socket, 1, sim.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer vm.Close()
		infos[name], drivers[name] = info, vm
	}
	fill := func(name string) error {
		d := drivers[name].Driver()
		ga, err := d.Alloc(abi.PageSize)
		if err != nil {
			return err
		}
		if err := d.Fill(ga, abi.PageSize, 0x01020304); err != nil {
			return err
		}
		if err := d.Wait(ctx, d.Fence(0)); err != nil {
			return err
		}
		return d.CheckErrors()
	}
	for _, name := range []string{"a", "b"} {
		if err := fill(name); err != nil {
			t.Fatalf("vGPU %s before the kill: %v", name, err)
		}
	}
	pid := infos["a"].GPUWorkerPID
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err = fill("a")
	if err == nil {
		t.Fatal("vGPU a ran commands after its worker was killed")
	}
	t.Logf("vGPU a after the kill: %v", err)
	if code, _, err := drivers["a"].Driver().StreamStatus(0); err != nil || code != abi.CudaErrorLaunchFailed {
		t.Errorf("vGPU a's stream 0 after the kill: code %d (%v), want 719", code, err)
	}
	if err := fill("b"); err != nil {
		t.Fatalf("vGPU b after a's worker was killed: %v", err)
	}
	if err := h.Destroy("a"); err != nil {
		t.Fatalf("destroying a: %v", err)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("a's worker (pid %d) after vgpu rm: %v, want ESRCH", pid, err)
	}
	if err := fill("b"); err != nil {
		t.Fatalf("vGPU b after a was destroyed: %v", err)
	}
	if lines := log.messages(gpuproc.MsgWorkerEnded); len(lines) != 1 || lines[0]["vgpu"] != "a" || !strings.Contains(fmt.Sprint(lines[0]["cause"]), "killed") {
		t.Errorf("log lines of the ended worker %v, want one naming vGPU a and the signal", lines)
	}
	if err := h.Destroy("b"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(infos["b"].GPUWorkerPID, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("b's worker after vgpu rm: %v, want ESRCH", err)
	}
}
