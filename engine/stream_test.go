package engine

import (
	"errors"
	"testing"

	"github.com/gmig-dev/gmig/abi"
)

// TestCudaCodes: each failure maps to the CUresult a CUDA driver call
// returns for it (docs/device-abi.md §5.1).
func TestCudaCodes(t *testing.T) {
	for _, c := range []struct {
		op   uint16
		code uint32
		want uint32
	}{
		{abi.OpCopy, abi.ErrPageFault, abi.CudaErrorIllegalAddress},
		{abi.OpLaunch, abi.ErrPageFault, abi.CudaErrorIllegalAddress},
		{abi.OpDMAToGfx, abi.ErrDMA, abi.CudaErrorInvalidValue},
		{abi.OpFill, abi.ErrCommand, abi.CudaErrorInvalidValue},
		{abi.OpKernelLoadModule, abi.ErrKernel, abi.CudaErrorInvalidImage},
		{abi.OpLaunch, abi.ErrKernel, abi.CudaErrorLaunchFailed},
		{abi.OpLaunchParams, abi.ErrKernel, abi.CudaErrorLaunchFailed},
		{abi.OpLaunchGrid, abi.ErrKernel, abi.CudaErrorLaunchFailed},
		{abi.OpLaunchGrid, abi.ErrPageFault, abi.CudaErrorIllegalAddress},
		{abi.OpKernelLoad, abi.ErrKernel, abi.CudaErrorInvalidHandle},
		{abi.OpCopy, abi.ErrMMIO, abi.CudaErrorUnknown},
	} {
		if got := cudaCode(c.op, c.code); got != c.want {
			t.Errorf("cudaCode(op %d, %#x) = %d, want %d", c.op, c.code, got, c.want)
		}
	}
}

// TestStreamStateChecked: a saved stream out of range or repeated is a bad
// state.
func TestStreamStateChecked(t *testing.T) {
	for _, ss := range [][]StreamState{
		{{ID: abi.MaxStreams}},
		{{ID: 3, Fence: 1}, {ID: 3, Err: 700}},
	} {
		if err := (State{Streams: ss}).Validate(); !errors.Is(err, ErrBadState) {
			t.Errorf("Validate(%v) = %v, want ErrBadState", ss, err)
		}
	}
	if err := (State{Streams: []StreamState{{ID: 255, Fence: 9}}}).Validate(); err != nil {
		t.Errorf("stream 255: %v", err)
	}
}
