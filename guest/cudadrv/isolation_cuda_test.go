//go:build cuda

package cudadrv

import (
	"bytes"
	"os"
	"testing"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/vgpu"
)

// TestScribbleContainedByWorkersGPU is TestScribbleContainedByWorkers on
// the machine's GPU (run with -tags cuda where there is one; it skips
// elsewhere, and under the model, whose variant runs untagged): A's kernel
// (kernels13.ptx's scribble, JIT-compiled by the driver) writes over B's
// device addresses, which name nothing in A's worker's context. CUDA
// reports a write to an unmapped address as CUDA_ERROR_ILLEGAL_ADDRESS
// (700), a sticky error of the context like 719, and either is what A's
// cuCtxSynchronize may answer; B's bytes must be unchanged and B must
// keep running commands.
func TestScribbleContainedByWorkersGPU(t *testing.T) {
	if os.Getenv(nvidia.ModelEnv) != "" {
		t.Skipf("skipping: %s is set (the model's run is TestScribbleContainedByWorkers)", nvidia.ModelEnv)
	}
	if _, err := nvidia.OpenGPU(vgpu.GPUOrdinal); err != nil {
		t.Skipf("skipping: no GPU here: %v", err)
	}
	aSync, _, b, got, want, _, _ := scribbleBOn(t, vgpu.IsolationProcess)
	t.Logf("A's cuCtxSynchronize after the scribble: %d", aSync)
	if aSync != Result(abi.CudaErrorIllegalAddress) && aSync != Result(abi.CudaErrorLaunchFailed) {
		t.Errorf("A's cuCtxSynchronize after the scribble: %d, want 700 or 719", aSync)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("B's device-local memory changed under A's kernel")
	}
	checkStillRuns(t, b)
}
