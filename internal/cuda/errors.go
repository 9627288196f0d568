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
	Success          Result = 0
	ErrorNoDevice    Result = 100 // CUDA_ERROR_NO_DEVICE
	ErrorInvalidPTX  Result = 218 // CUDA_ERROR_INVALID_PTX
	ErrorNotFound    Result = 500 // CUDA_ERROR_NOT_FOUND (no such kernel in a module)
	ErrorIllegalAddr Result = 700 // CUDA_ERROR_ILLEGAL_ADDRESS (sticky)
)

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
