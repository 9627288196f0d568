package main

/*
#include "shim.h"
*/
import "C"

import (
	"unsafe"

	"github.com/gmig-dev/gmig/guest/cudadrv"
)

// The exported entry points for host memory, function attributes and
// context versions (the rest are in exports.go and exports_work.go).

//export cuMemAllocHost_v2
func cuMemAllocHost_v2(pp *unsafe.Pointer, n C.size_t) C.CUresult { return cuMemHostAlloc(pp, n, 0) }

//export cuMemHostAlloc
func cuMemHostAlloc(pp *unsafe.Pointer, n C.size_t, flags C.uint) C.CUresult {
	if pp == nil {
		return errInvalid
	}
	b, res := lib.MemHostAlloc(thread(), uint64(n), uint32(flags))
	*pp = nil
	if res == cudadrv.Success {
		*pp = unsafe.Pointer(unsafe.SliceData(b)) // a mapping outside Go's heap
	}
	return r(res)
}

//export cuMemFreeHost
func cuMemFreeHost(ptr unsafe.Pointer) C.CUresult { return r(lib.MemFreeHost(uintptr(ptr))) }

//export cuMemHostGetDevicePointer_v2
func cuMemHostGetDevicePointer_v2(dptr *C.CUdeviceptr, ptr unsafe.Pointer, flags C.uint) C.CUresult {
	if dptr == nil {
		return errInvalid
	}
	v, res := lib.MemHostGetDevicePointer(thread(), uintptr(ptr), uint32(flags))
	*dptr = C.CUdeviceptr(v)
	return r(res)
}

//export cuCtxGetApiVersion
func cuCtxGetApiVersion(ctx C.CUcontext, version *C.uint) C.CUresult {
	if version == nil {
		return errInvalid
	}
	v, res := lib.CtxGetAPIVersion(thread(), h(unsafe.Pointer(ctx)))
	*version = C.uint(v)
	return r(res)
}

//export cuFuncGetAttribute
func cuFuncGetAttribute(v *C.int, attr C.int, f C.CUfunction) C.CUresult {
	if v == nil {
		return errInvalid
	}
	a, res := lib.FuncGetAttribute(int32(attr), h(unsafe.Pointer(f)))
	*v = C.int(a)
	return r(res)
}

//export cuFuncGetParamInfo
func cuFuncGetParamInfo(f C.CUfunction, i C.size_t, offset, size *C.size_t) C.CUresult {
	o, s, res := lib.FuncGetParamInfo(h(unsafe.Pointer(f)), uint64(i))
	if res == cudadrv.Success {
		if offset != nil {
			*offset = C.size_t(o)
		}
		if size != nil {
			*size = C.size_t(s)
		}
	}
	return r(res)
}
