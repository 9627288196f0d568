package cuda

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"unsafe"
)

// JIT options (cuda.h, enum CUjit_option).
const (
	jitErrorLogBuffer     = 5 // CU_JIT_ERROR_LOG_BUFFER
	jitErrorLogBufferSize = 6 // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
)

// jitLogSize is the JIT error log kept for a failed module load.
const jitLogSize = 4096

// LoadModule loads a PTX (or cubin) image; the driver compiles PTX for the
// device. A PTX image needs no terminating NUL: one is added. A failed
// compilation's *Error carries the JIT's log in Detail.
func (dv *Device) LoadModule(image []byte) (Module, error) {
	img := make([]byte, len(image)+1)
	copy(img, image)
	logBuf := make([]byte, jitLogSize)
	opts := []int32{jitErrorLogBuffer, jitErrorLogBufferSize}
	var pin runtime.Pinner
	pin.Pin(&logBuf[0])
	defer pin.Unpin()
	vals := []uintptr{uintptr(unsafe.Pointer(&logBuf[0])), jitLogSize}
	var m Module
	err := dv.do("cuModuleLoadDataEx", func() Result {
		return dv.d.fn.cuModuleLoadDataEx(&m, unsafe.Pointer(&img[0]), uint32(len(opts)), &opts[0], &vals[0])
	})
	runtime.KeepAlive(img)
	if err != nil {
		var e *Error
		if errors.As(err, &e) {
			if log := strings.TrimSpace(goString(&logBuf[0])); log != "" {
				e.Detail = log
			}
		}
		return 0, err
	}
	return m, nil
}

// UnloadModule unloads m; its functions become invalid.
func (dv *Device) UnloadModule(m Module) error {
	return dv.do("cuModuleUnload", func() Result { return dv.d.fn.cuModuleUnload(m) })
}

// Function looks up kernel name in m.
func (dv *Device) Function(m Module, name string) (Function, error) {
	var f Function
	err := dv.do("cuModuleGetFunction", func() Result { return dv.d.fn.cuModuleGetFunction(&f, m, name) })
	if err != nil {
		return 0, fmt.Errorf("cuda: kernel %q: %w", name, err)
	}
	return f, nil
}

// funcAttrNumRegs is CU_FUNC_ATTRIBUTE_NUM_REGS (cuda.h).
const funcAttrNumRegs = 4

// Registers is the number of registers a thread of f uses.
func (dv *Device) Registers(f Function) (int, error) {
	var v int32
	err := dv.do("cuFuncGetAttribute", func() Result { return dv.d.fn.cuFuncGetAttribute(&v, funcAttrNumRegs, f) })
	return int(v), err
}

// Occupancy returns the block size that maximises occupancy for f and the
// smallest grid that fills the device at that size.
func (dv *Device) Occupancy(f Function) (minGrid, block int, err error) {
	var g, b int32
	err = dv.do("cuOccupancyMaxPotentialBlockSize", func() Result {
		return dv.d.fn.cuOccupancyMaxPotentialBlockSz(&g, &b, f, 0, 0, 0)
	})
	return int(g), int(b), err
}

// Launch queues f on s with a grid of grid blocks of block threads (1-D)
// and the given parameters, each passed as the 8 bytes of a uint64: a
// kernel parameter of 4 bytes (int, unsigned, float) reads the low half
// (little-endian), so pass math.Float32bits for a float.
func (dv *Device) Launch(f Function, grid, block uint32, s Stream, params ...uint64) error {
	vals := make([]uint64, max(len(params), 1))
	copy(vals, params)
	ptrs := make([]unsafe.Pointer, len(vals))
	var pin runtime.Pinner
	pin.Pin(&vals[0])
	defer pin.Unpin()
	for i := range vals {
		ptrs[i] = unsafe.Pointer(&vals[i])
	}
	pin.Pin(&ptrs[0])
	return dv.do("cuLaunchKernel", func() Result {
		return dv.d.fn.cuLaunchKernel(f, grid, 1, 1, block, 1, 1, 0, s, unsafe.Pointer(&ptrs[0]), nil)
	})
}

// cuLaunchKernel's extra markers (cuda.h: CU_LAUNCH_PARAM_END_AS_INT,
// CU_LAUNCH_PARAM_BUFFER_POINTER_AS_INT, CU_LAUNCH_PARAM_BUFFER_SIZE_AS_INT).
const (
	launchParamEnd           = 0x00
	launchParamBufferPointer = 0x01
	launchParamBufferSize    = 0x02
)

// launchExtra is one launch's extra array and the buffer size it points
// at, reused through launchExtras so that a launch allocates nothing.
type launchExtra struct {
	extra [5]uintptr
	size  uintptr
	pin   runtime.Pinner
}

var launchExtras = sync.Pool{New: func() any { return new(launchExtra) }}

// LaunchBuffer queues f on s with a grid of grid blocks of block threads
// (x, y, z), sharedBytes of dynamic shared memory per block, and params
// as the kernel's parameter buffer, passed unchanged through
// cuLaunchKernel's extra (CU_LAUNCH_PARAM_BUFFER_POINTER and _SIZE):
// params must be laid out as f's parameters are (each at the next offset
// aligned to it, as cuFuncGetParamInfo reports). It returns once the
// launch is queued; a kernel that faults makes a later call on the
// context fail.
func (dv *Device) LaunchBuffer(f Function, grid, block [3]uint32, sharedBytes uint32, s Stream, params []byte) error {
	if len(params) == 0 {
		return dv.do("cuLaunchKernel", func() Result {
			return dv.d.fn.cuLaunchKernel(f, grid[0], grid[1], grid[2], block[0], block[1], block[2], sharedBytes, s, nil, nil)
		})
	}
	x := launchExtras.Get().(*launchExtra)
	defer launchExtras.Put(x)
	x.pin.Pin(&params[0])
	x.pin.Pin(x)
	defer x.pin.Unpin()
	x.size = uintptr(len(params))
	x.extra = [5]uintptr{
		launchParamBufferPointer, uintptr(unsafe.Pointer(&params[0])),
		launchParamBufferSize, uintptr(unsafe.Pointer(&x.size)),
		launchParamEnd,
	}
	err := dv.do("cuLaunchKernel", func() Result {
		return dv.d.fn.cuLaunchKernel(f, grid[0], grid[1], grid[2], block[0], block[1], block[2], sharedBytes, s, nil, unsafe.Pointer(&x.extra[0]))
	})
	runtime.KeepAlive(params)
	return err
}
