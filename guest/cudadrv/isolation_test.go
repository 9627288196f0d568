package cudadrv

import (
	"bytes"
	"syscall"
	"testing"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/vgpu"
)

// The hostile kernel (docs/nvidia.md, "Isolation"): two CUDA vGPUs of one
// gmigd (this process), both guests through this library. Guest A loads
// kernels13.ptx's scribble and launches it over guest B's whole
// device-local memory, B's DEVICE_ADDR_BASE .. +LOCAL_MEM_SIZE, an
// address A can compute (every vGPU's base is in the same region).

// scribbleB runs the attack on vGPUs of isolation iso and returns A's
// cuCtxSynchronize after the launch, what B reads back of the buffer it
// filled, and that buffer's pattern.
func scribbleB(t *testing.T, iso string) (aSync Result, a, b *Lib, got, want []byte, va, vb *vgpu.VGPU) {
	t.Helper()
	t.Setenv(nvidia.ModelEnv, "1")
	return scribbleBOn(t, iso)
}

// scribbleBOn is scribbleB on whatever GPU nvidia.OpenGPU gives: the
// model's where ModelEnv is set, else the machine's (isolation_cuda_test.go).
func scribbleBOn(t *testing.T, iso string) (aSync Result, a, b *Lib, got, want []byte, va, vb *vgpu.VGPU) {
	t.Helper()
	p := migtest.NewPool(t, 4*(testMem+localSize))
	a, va = gridLibIn(t, p, "a", iso, Config{})
	b, vb = gridLibIn(t, p, "b", iso, Config{})
	const n = 64 << 10
	want = bytes.Repeat([]byte("victim B"), n/8)
	pb, r := b.MemAlloc(thread, n)
	must(t, r)
	must(t, b.MemcpyHtoD(thread, pb, want))
	must(t, b.CtxSynchronize(thread))

	base, err := b.Driver().Bus().ReadReg64(abi.RegDeviceAddrBase)
	if err != nil {
		t.Fatal(err)
	}
	if own, _ := a.Driver().Bus().ReadReg64(abi.RegDeviceAddrBase); own == base {
		t.Fatalf("A and B have the same DEVICE_ADDR_BASE %#x", base) // 1 in 65536 with a worker each
	}
	scribble := loadFunction(t, a, "scribble")
	words := b.Driver().LocalMemSize() / 4
	must(t, a.LaunchKernel(thread, scribble, [3]uint32{1024, 1, 1}, [3]uint32{256, 1, 1}, 0, 0, paramBuf(base, words, uint32(0x5c5c5c5c))))
	aSync = a.CtxSynchronize(thread)
	got = make([]byte, n)
	must(t, b.MemcpyDtoH(thread, got, pb))
	return aSync, a, b, got, want, va, vb
}

// TestScribbleContainedByWorkers: with a GPU worker per vGPU (isolation
// "process", the default) B's device addresses name nothing in A's
// context: A's kernel faults, A's cuCtxSynchronize answers 719
// (CUDA_ERROR_LAUNCH_FAILED) and so does A's context from then on, B's
// bytes are unchanged and B keeps running commands; removing A ends its
// worker.
func TestScribbleContainedByWorkers(t *testing.T) {
	aSync, a, b, got, want, _, _ := scribbleB(t, vgpu.IsolationProcess)
	if aSync != Result(abi.CudaErrorLaunchFailed) {
		t.Errorf("A's cuCtxSynchronize after the scribble: %d, want 719", aSync)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("B's device-local memory changed under A's kernel")
	}
	if r := a.MemcpyHtoD(thread, 0, make([]byte, 8)); r == Success {
		t.Error("A's failed context still copies")
	}
	checkStillRuns(t, b)
}

// checkStillRuns checks that b's commands run after its neighbour's
// fault: a memset of a fresh allocation reads back.
func checkStillRuns(t *testing.T, b *Lib) {
	t.Helper()
	pb, r := b.MemAlloc(thread, 4096)
	must(t, r)
	must(t, b.Memset(thread, pb, 0x11, 1, 4096, 0, false))
	page := make([]byte, 4096)
	must(t, b.MemcpyDtoH(thread, page, pb))
	if !bytes.Equal(page, bytes.Repeat([]byte{0x11}, 4096)) {
		t.Error("B's commands after A's fault do not run")
	}
}

// TestScribbleSharedContext: in one CUDA context (isolation "shared") the
// same kernel reaches B's memory: A's launch succeeds and B's bytes are
// the pattern. The hazard the worker processes remove, seen.
func TestScribbleSharedContext(t *testing.T) {
	aSync, _, _, got, _, _, _ := scribbleB(t, vgpu.IsolationShared)
	if aSync != Success {
		t.Errorf("A's cuCtxSynchronize after the scribble: %d, want success", aSync)
	}
	if !bytes.Equal(got, bytes.Repeat([]byte{0x5c}, len(got))) {
		t.Fatal("in a shared context the scribble did not reach B's memory (the hazard the test must see)")
	}
}

// TestRemoveEndsWorker: destroying process-isolated vGPUs ends their
// workers, the one whose context A's fault left failed and B's; no
// process is left.
func TestRemoveEndsWorker(t *testing.T) {
	_, _, _, _, _, va, vb := scribbleB(t, vgpu.IsolationProcess)
	for _, v := range []*vgpu.VGPU{va, vb} {
		pid := v.GPUWorkerPID()
		if pid == 0 {
			t.Fatalf("%s has no GPU worker", v.Name())
		}
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
		if err := syscall.Kill(pid, 0); err != syscall.ESRCH {
			t.Errorf("%s's worker (pid %d) after its vGPU closed: %v, want ESRCH", v.Name(), pid, err)
		}
	}
}
