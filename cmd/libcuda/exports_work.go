package main

/*
#include "shim.h"
*/
import "C"

import (
	"encoding/binary"
	"os"
	"unsafe"

	"github.com/gmig-dev/gmig/guest/cudadrv"
)

// The exported entry points that submit work: copies, memsets, streams,
// events, modules and launches (the rest are in exports.go).

func nilNull(ptr unsafe.Pointer, n C.size_t) bool { return ptr == nil && n != 0 }

//export cuMemcpyHtoD_v2
func cuMemcpyHtoD_v2(dst C.CUdeviceptr, src unsafe.Pointer, n C.size_t) C.CUresult {
	if nilNull(src, n) {
		return errInvalid
	}
	return r(lib.MemcpyHtoD(thread(), uint64(dst), bytesAt(src, n)))
}

//export cuMemcpyHtoDAsync_v2
func cuMemcpyHtoDAsync_v2(dst C.CUdeviceptr, src unsafe.Pointer, n C.size_t, s C.CUstream) C.CUresult {
	if res := lib.StreamCheck(thread(), h(unsafe.Pointer(s))); res != cudadrv.Success {
		return r(res)
	}
	return cuMemcpyHtoD_v2(dst, src, n)
}

//export cuMemcpyDtoH_v2
func cuMemcpyDtoH_v2(dst unsafe.Pointer, src C.CUdeviceptr, n C.size_t) C.CUresult {
	if nilNull(dst, n) {
		return errInvalid
	}
	return r(lib.MemcpyDtoH(thread(), bytesAt(dst, n), uint64(src)))
}

//export cuMemcpyDtoHAsync_v2
func cuMemcpyDtoHAsync_v2(dst unsafe.Pointer, src C.CUdeviceptr, n C.size_t, s C.CUstream) C.CUresult {
	if res := lib.StreamCheck(thread(), h(unsafe.Pointer(s))); res != cudadrv.Success {
		return r(res)
	}
	return cuMemcpyDtoH_v2(dst, src, n)
}

//export cuMemcpyDtoD_v2
func cuMemcpyDtoD_v2(dst, src C.CUdeviceptr, n C.size_t) C.CUresult {
	return r(lib.MemcpyDtoD(thread(), uint64(dst), uint64(src), uint64(n), 0, false))
}

//export cuMemcpyDtoDAsync_v2
func cuMemcpyDtoDAsync_v2(dst, src C.CUdeviceptr, n C.size_t, s C.CUstream) C.CUresult {
	return r(lib.MemcpyDtoD(thread(), uint64(dst), uint64(src), uint64(n), h(unsafe.Pointer(s)), true))
}

func memset(dst C.CUdeviceptr, v uint32, width int, n C.size_t, s C.CUstream, async bool) C.CUresult {
	return r(lib.Memset(thread(), uint64(dst), v, width, uint64(n), h(unsafe.Pointer(s)), async))
}

//export cuMemsetD8_v2
func cuMemsetD8_v2(dst C.CUdeviceptr, v C.uchar, n C.size_t) C.CUresult {
	return memset(dst, uint32(v), 1, n, nil, false)
}

//export cuMemsetD16_v2
func cuMemsetD16_v2(dst C.CUdeviceptr, v C.ushort, n C.size_t) C.CUresult {
	return memset(dst, uint32(v), 2, n, nil, false)
}

//export cuMemsetD32_v2
func cuMemsetD32_v2(dst C.CUdeviceptr, v C.uint, n C.size_t) C.CUresult {
	return memset(dst, uint32(v), 4, n, nil, false)
}

//export cuMemsetD8Async
func cuMemsetD8Async(dst C.CUdeviceptr, v C.uchar, n C.size_t, s C.CUstream) C.CUresult {
	return memset(dst, uint32(v), 1, n, s, true)
}

//export cuMemsetD16Async
func cuMemsetD16Async(dst C.CUdeviceptr, v C.ushort, n C.size_t, s C.CUstream) C.CUresult {
	return memset(dst, uint32(v), 2, n, s, true)
}

//export cuMemsetD32Async
func cuMemsetD32Async(dst C.CUdeviceptr, v C.uint, n C.size_t, s C.CUstream) C.CUresult {
	return memset(dst, uint32(v), 4, n, s, true)
}

//export cuStreamCreate
func cuStreamCreate(s *C.CUstream, flags C.uint) C.CUresult {
	if s == nil {
		return errInvalid
	}
	x, res := lib.StreamCreate(thread(), uint32(flags))
	*s = C.CUstream(p(x))
	return r(res)
}

//export cuStreamDestroy_v2
func cuStreamDestroy_v2(s C.CUstream) C.CUresult { return r(lib.StreamDestroy(h(unsafe.Pointer(s)))) }

//export cuStreamSynchronize
func cuStreamSynchronize(s C.CUstream) C.CUresult {
	return r(lib.StreamSynchronize(thread(), h(unsafe.Pointer(s))))
}

//export cuStreamQuery
func cuStreamQuery(s C.CUstream) C.CUresult {
	return r(lib.StreamQuery(thread(), h(unsafe.Pointer(s))))
}

//export cuStreamWaitEvent
func cuStreamWaitEvent(s C.CUstream, e C.CUevent, flags C.uint) C.CUresult {
	return r(lib.StreamWaitEvent(thread(), h(unsafe.Pointer(s)), h(unsafe.Pointer(e)), uint32(flags)))
}

//export cuEventCreate
func cuEventCreate(e *C.CUevent, flags C.uint) C.CUresult {
	if e == nil {
		return errInvalid
	}
	x, res := lib.EventCreate(thread(), uint32(flags))
	*e = C.CUevent(p(x))
	return r(res)
}

//export cuEventDestroy_v2
func cuEventDestroy_v2(e C.CUevent) C.CUresult { return r(lib.EventDestroy(h(unsafe.Pointer(e)))) }

//export cuEventRecord
func cuEventRecord(e C.CUevent, s C.CUstream) C.CUresult {
	return r(lib.EventRecord(thread(), h(unsafe.Pointer(e)), h(unsafe.Pointer(s))))
}

//export cuEventQuery
func cuEventQuery(e C.CUevent) C.CUresult { return r(lib.EventQuery(h(unsafe.Pointer(e)))) }

//export cuEventSynchronize
func cuEventSynchronize(e C.CUevent) C.CUresult { return r(lib.EventSynchronize(h(unsafe.Pointer(e)))) }

//export cuEventElapsedTime
func cuEventElapsedTime(ms *C.float, start, end C.CUevent) C.CUresult {
	if ms == nil {
		return errInvalid
	}
	v, res := lib.EventElapsedTime(h(unsafe.Pointer(start)), h(unsafe.Pointer(end)))
	*ms = C.float(v)
	return r(res)
}

// imageBytes is the module image at ptr with its length: a fatbin's from
// its header (fatbinary.h: u32 magic, u16 version, u16 header size, u64
// payload size), an ELF cubin's from its section header table (which ends
// it), PTX text up to its NUL.
// Only the 4 magic bytes are read before the image's kind is known (PTX
// may be shorter than a header).
func imageBytes(ptr unsafe.Pointer) []byte {
	magic := unsafe.Slice((*byte)(ptr), 4)
	switch {
	case binary.LittleEndian.Uint32(magic) == 0xBA55ED50:
		head := unsafe.Slice((*byte)(ptr), 16)
		return unsafe.Slice((*byte)(ptr), int(binary.LittleEndian.Uint16(head[6:]))+int(binary.LittleEndian.Uint64(head[8:])))
	case string(magic) == "\x7fELF":
		head := unsafe.Slice((*byte)(ptr), 64) // the ELF64 header
		shoff := binary.LittleEndian.Uint64(head[0x28:])
		n := shoff + uint64(binary.LittleEndian.Uint16(head[0x3a:]))*uint64(binary.LittleEndian.Uint16(head[0x3c:]))
		return unsafe.Slice((*byte)(ptr), int(n))
	}
	return []byte(C.GoString((*C.char)(ptr)))
}

//export cuModuleLoadData
func cuModuleLoadData(m *C.CUmodule, image unsafe.Pointer) C.CUresult {
	if m == nil || image == nil {
		return errInvalid
	}
	x, res := lib.ModuleLoadData(thread(), imageBytes(image))
	*m = C.CUmodule(p(x))
	return r(res)
}

//export cuModuleLoadDataEx
func cuModuleLoadDataEx(m *C.CUmodule, image unsafe.Pointer, nopts C.uint, opts, vals unsafe.Pointer) C.CUresult {
	return cuModuleLoadData(m, image)
}

//export cuModuleLoad
func cuModuleLoad(m *C.CUmodule, name *C.char) C.CUresult {
	if m == nil || name == nil {
		return errInvalid
	}
	b, err := os.ReadFile(C.GoString(name))
	if err != nil {
		return r(cudadrv.ErrFileNotFound)
	}
	x, res := lib.ModuleLoadData(thread(), b)
	*m = C.CUmodule(p(x))
	return r(res)
}

//export cuModuleUnload
func cuModuleUnload(m C.CUmodule) C.CUresult { return r(lib.ModuleUnload(h(unsafe.Pointer(m)))) }

//export cuModuleGetFunction
func cuModuleGetFunction(f *C.CUfunction, m C.CUmodule, name *C.char) C.CUresult {
	if f == nil || name == nil {
		return errInvalid
	}
	x, res := lib.ModuleGetFunction(h(unsafe.Pointer(m)), C.GoString(name))
	*f = C.CUfunction(p(x))
	return r(res)
}

//export cuModuleGetGlobal_v2
func cuModuleGetGlobal_v2(ptr *C.CUdeviceptr, size *C.size_t, m C.CUmodule, name *C.char) C.CUresult {
	if name == nil {
		return errInvalid
	}
	ga, n, res := lib.ModuleGetGlobal(h(unsafe.Pointer(m)), C.GoString(name))
	if ptr != nil {
		*ptr = C.CUdeviceptr(ga)
	}
	if size != nil {
		*size = C.size_t(n)
	}
	return r(res)
}

// cuLaunchKernel's extra keys (cuda.h, CU_LAUNCH_PARAM_*_AS_INT).
const (
	launchParamEnd           = 0x00
	launchParamBufferPointer = 0x01
	launchParamBufferSize    = 0x02
)

//export cuLaunchKernel
func cuLaunchKernel(f C.CUfunction, gx, gy, gz, bx, by, bz, shared C.uint, s C.CUstream, params *unsafe.Pointer, extra *unsafe.Pointer) C.CUresult {
	fn := h(unsafe.Pointer(f))
	layout, res := lib.FuncLayout(fn)
	if res != cudadrv.Success {
		return r(res)
	}
	var buf []byte
	switch {
	case params != nil && extra != nil:
		return errInvalid
	case extra != nil:
		if buf, res = extraBuffer(extra); res != cudadrv.Success {
			return r(res)
		}
		if len(buf) < int(layout.Size) {
			return errInvalid
		}
		buf = buf[:layout.Size]
	case params == nil && len(layout.Params) > 0:
		return errInvalid
	default:
		buf = make([]byte, layout.Size)
		for i, prm := range layout.Params {
			a := C.gmig_param(params, C.int(i))
			copy(buf[prm.Offset:], unsafe.Slice((*byte)(a), int(prm.Size)))
		}
	}
	return r(lib.LaunchKernel(thread(), fn, [3]uint32{uint32(gx), uint32(gy), uint32(gz)},
		[3]uint32{uint32(bx), uint32(by), uint32(bz)}, uint32(shared), h(unsafe.Pointer(s)), buf))
}

// extraBuffer reads cuLaunchKernel's extra array: key, value pairs up to
// CU_LAUNCH_PARAM_END, of which CU_LAUNCH_PARAM_BUFFER_POINTER and
// CU_LAUNCH_PARAM_BUFFER_SIZE (a pointer to a size_t) give the parameter
// buffer; without both there is none (cuda.h: the pointer alone has no
// effect), which only a kernel without parameters may launch with.
func extraBuffer(extra *unsafe.Pointer) ([]byte, cudadrv.Result) {
	var ptr unsafe.Pointer
	var size *C.size_t
	for i := 0; ; i += 2 {
		key := uintptr(C.gmig_h(C.gmig_param(extra, C.int(i))))
		if key == launchParamEnd {
			break
		}
		val := C.gmig_param(extra, C.int(i+1))
		switch key {
		case launchParamBufferPointer:
			ptr = val
		case launchParamBufferSize:
			size = (*C.size_t)(val)
		default:
			return nil, cudadrv.ErrInvalidValue
		}
	}
	if ptr == nil || size == nil {
		return nil, cudadrv.Success
	}
	return bytesAt(ptr, *size), cudadrv.Success
}
