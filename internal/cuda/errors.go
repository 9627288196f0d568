package cuda

import (
	"errors"
	"fmt"
	"unsafe"
)

// Sentinel errors callers branch on.
var (
	// ErrNoDriver means libcuda.so.1 could not be loaded or lacks a symbol
	// gmig needs: no NVIDIA driver on this machine.
	ErrNoDriver = errors.New("cuda: no NVIDIA driver (libcuda.so.1)")
	// ErrNoDevice means the driver loaded but reports no usable GPU.
	ErrNoDevice = errors.New("cuda: no CUDA device")
)

// Result is a CUresult (cuda.h, enum cudaError_enum).
type Result uint32

// CUresult values gmig branches on (cuda.h).
const (
	Success           Result = 0
	ErrorNoDevice     Result = 100 // CUDA_ERROR_NO_DEVICE
	ErrorInvalidPTX   Result = 218 // CUDA_ERROR_INVALID_PTX
	ErrorNotFound     Result = 500 // CUDA_ERROR_NOT_FOUND (no such kernel in a module)
	ErrorIllegalAddr  Result = 700 // CUDA_ERROR_ILLEGAL_ADDRESS (sticky)
	ErrorLaunchFailed Result = 719 // CUDA_ERROR_LAUNCH_FAILED (sticky)
)

// Sticky reports whether r leaves the context it happened in unusable:
// the errors a faulting kernel raises, after which every call of the
// context returns the same error until the process ends (cuda.h: 700
// CUDA_ERROR_ILLEGAL_ADDRESS, 714 HARDWARE_STACK_ERROR, 715
// ILLEGAL_INSTRUCTION, 716 MISALIGNED_ADDRESS, 717 INVALID_ADDRESS_SPACE,
// 718 INVALID_PC, 719 LAUNCH_FAILED: "the process must be terminated and
// relaunched").
func (r Result) Sticky() bool { return r == 700 || (r >= 714 && r <= 719) }

// Error is a failed driver call.
type Error struct {
	Op     string // the driver function, e.g. "cuMemMap"
	Code   Result
	Name   string // cuGetErrorName, e.g. "CUDA_ERROR_OUT_OF_MEMORY"
	Detail string // cuGetErrorString, or the JIT's log for a module
}

func (e *Error) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("cuda: %s: %s (%d): %s", e.Op, e.Name, e.Code, e.Detail)
	}
	return fmt.Sprintf("cuda: %s: %s (%d)", e.Op, e.Name, e.Code)
}

// Is lets errors.Is match an *Error against a Result: errors.Is(err,
// cuda.ErrorInvalidPTX).
func (e *Error) Is(target error) bool {
	r, ok := target.(Result)
	return ok && r == e.Code
}

// StickyCode is the CUresult when the error left its context unusable
// (Result.Sticky), else 0: what a vGPU's later commands answer on their
// streams (engine.StickyCode).
func (e *Error) StickyCode() uint32 {
	if e.Code.Sticky() {
		return uint32(e.Code)
	}
	return 0
}

// Error makes a Result usable as an errors.Is target.
func (r Result) Error() string { return fmt.Sprintf("cuda: CUresult %d", uint32(r)) }

// err turns a failed call into an *Error with the driver's own names.
func (d *Driver) err(op string, r Result) error {
	if r == Success {
		return nil
	}
	e := &Error{Op: op, Code: r, Name: fmt.Sprintf("CUresult(%d)", uint32(r))}
	var p *byte
	if d.fn.cuGetErrorName(r, &p) == Success && p != nil {
		e.Name = goString(p)
	}
	p = nil
	if d.fn.cuGetErrorString(r, &p) == Success && p != nil {
		e.Detail = goString(p)
	}
	return e
}

// goString copies the NUL-terminated C string at p (at most 4 KiB), a byte
// at a time so that it never reads past the terminator.
func goString(p *byte) string {
	var b []byte
	for i := 0; i < 4096; i++ {
		c := *(*byte)(unsafe.Add(unsafe.Pointer(p), i))
		if c == 0 {
			break
		}
		b = append(b, c)
	}
	return string(b)
}
