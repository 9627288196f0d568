package gpuproc

import (
	"errors"
	"fmt"

	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/engine/cpuref"
	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/internal/cuda"
)

// ErrWorkerLost reports a call to a vGPU whose GPU worker is gone (it
// exited, was killed, or stopped answering). The error's StickyCode is
// CUDA_ERROR_LAUNCH_FAILED: the vGPU's commands answer 719 on their
// streams, as they would on a context a faulting kernel left unusable.
var ErrWorkerLost = errors.New("gpuproc: the vGPU's GPU worker is gone")

// The sentinel errors a KindError frame carries as bits, so that the
// client's callers branch on a worker's errors as on the in-process back
// end's.
var errBits = []error{
	engine.ErrLaunchFailed,
	engine.ErrBadKernel,
	engine.ErrNoModules,
	cpuref.ErrBounds,
	nvidia.ErrDeviceAddr,
	ErrMalformed,
	cuda.ErrNoDriver,
	cuda.ErrNoDevice,
}

// errorMsg is the KindError payload of err.
func errorMsg(err error) Msg {
	var bits uint32
	for i, s := range errBits {
		if errors.Is(err, s) {
			bits |= 1 << i
		}
	}
	return Msg{A: bits, B: engine.StickyCode(err), Str: err.Error()}
}

// remoteError is a worker's error as the client returns it: its message,
// the sentinels it wrapped (errors.Is) and its sticky CUDA code.
type remoteError struct {
	msg    string
	bits   uint32
	sticky uint32
}

func (e *remoteError) Error() string { return e.msg }

func (e *remoteError) Is(target error) bool {
	for i, s := range errBits {
		if e.bits&(1<<i) != 0 && target == s {
			return true
		}
	}
	return false
}

// StickyCode implements engine.StickyCode's interface.
func (e *remoteError) StickyCode() uint32 { return e.sticky }

func remoteErrorOf(m Msg) error {
	return &remoteError{msg: m.Str, bits: m.A, sticky: m.B}
}

// lostError is ErrWorkerLost with its cause.
type lostError struct{ cause error }

func (e *lostError) Error() string        { return fmt.Sprintf("%v: %v", ErrWorkerLost, e.cause) }
func (e *lostError) Is(target error) bool { return target == ErrWorkerLost }
func (e *lostError) Unwrap() error        { return e.cause }

// StickyCode implements engine.StickyCode's interface: 719.
func (e *lostError) StickyCode() uint32 { return uint32(cuda.ErrorLaunchFailed) }
