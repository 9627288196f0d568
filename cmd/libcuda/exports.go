package main

/*
#include "shim.h"
*/
import "C"

import (
	"unsafe"

	"github.com/gmig-dev/gmig/guest/cudadrv"
)

// The exported entry points: each converts C types, calls guest/cudadrv
// and converts back. Names and signatures are cuda.h's (CUDA 12.4), _v2
// where its #defines map the plain name there.

func r(res cudadrv.Result) C.CUresult { return C.CUresult(res) }

func h(p unsafe.Pointer) cudadrv.Handle { return cudadrv.Handle(C.gmig_h(p)) }

func p(h cudadrv.Handle) unsafe.Pointer { return C.gmig_p(C.uintptr_t(h)) }

func bytesAt(ptr unsafe.Pointer, n C.size_t) []byte {
	if n == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(ptr), int(n))
}

var errInvalid = r(cudadrv.ErrInvalidValue)

//export cuInit
func cuInit(flags C.uint) C.CUresult { return r(lib.Init(uint32(flags))) }

//export cuDriverGetVersion
func cuDriverGetVersion(v *C.int) C.CUresult {
	if v == nil {
		return errInvalid
	}
	*v = C.int(lib.DriverGetVersion())
	return 0
}

//export cuDeviceGetCount
func cuDeviceGetCount(n *C.int) C.CUresult {
	if n == nil {
		return errInvalid
	}
	c, res := lib.DeviceGetCount()
	*n = C.int(c)
	return r(res)
}

//export cuDeviceGet
func cuDeviceGet(dev *C.CUdevice, ordinal C.int) C.CUresult {
	if dev == nil {
		return errInvalid
	}
	d, res := lib.DeviceGet(int32(ordinal))
	*dev = C.CUdevice(d)
	return r(res)
}

//export cuDeviceGetName
func cuDeviceGetName(name *C.char, n C.int, dev C.CUdevice) C.CUresult {
	if name == nil || n <= 0 {
		return errInvalid
	}
	s, res := lib.DeviceGetName(cudadrv.Device(dev))
	if res == cudadrv.Success {
		b := unsafe.Slice((*byte)(unsafe.Pointer(name)), int(n))
		b[copy(b[:len(b)-1], s)] = 0
	}
	return r(res)
}

//export cuDeviceGetUuid
func cuDeviceGetUuid(u *C.CUuuid, dev C.CUdevice) C.CUresult {
	if u == nil {
		return errInvalid
	}
	id, res := lib.DeviceGetUUID(cudadrv.Device(dev))
	copy(unsafe.Slice((*byte)(unsafe.Pointer(u)), 16), id[:])
	return r(res)
}

//export cuDeviceGetUuid_v2
func cuDeviceGetUuid_v2(u *C.CUuuid, dev C.CUdevice) C.CUresult { return cuDeviceGetUuid(u, dev) }

//export cuDeviceTotalMem_v2
func cuDeviceTotalMem_v2(n *C.size_t, dev C.CUdevice) C.CUresult {
	if n == nil {
		return errInvalid
	}
	v, res := lib.DeviceTotalMem(cudadrv.Device(dev))
	*n = C.size_t(v)
	return r(res)
}

//export cuDeviceGetAttribute
func cuDeviceGetAttribute(v *C.int, attr C.int, dev C.CUdevice) C.CUresult {
	if v == nil {
		return errInvalid
	}
	a, res := lib.DeviceGetAttribute(int32(attr), cudadrv.Device(dev))
	*v = C.int(a)
	return r(res)
}

//export cuDeviceComputeCapability
func cuDeviceComputeCapability(major, minor *C.int, dev C.CUdevice) C.CUresult {
	if major == nil || minor == nil {
		return errInvalid
	}
	if res := cuDeviceGetAttribute(major, 75, dev); res != 0 { // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR
		return res
	}
	return cuDeviceGetAttribute(minor, 76, dev) // CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR
}

//export cuDevicePrimaryCtxRetain
func cuDevicePrimaryCtxRetain(ctx *C.CUcontext, dev C.CUdevice) C.CUresult {
	if ctx == nil {
		return errInvalid
	}
	c, res := lib.DevicePrimaryCtxRetain(cudadrv.Device(dev))
	*ctx = C.CUcontext(p(c))
	return r(res)
}

//export cuDevicePrimaryCtxRelease_v2
func cuDevicePrimaryCtxRelease_v2(dev C.CUdevice) C.CUresult {
	return r(lib.DevicePrimaryCtxRelease(cudadrv.Device(dev)))
}

//export cuDevicePrimaryCtxReset_v2
func cuDevicePrimaryCtxReset_v2(dev C.CUdevice) C.CUresult {
	return r(lib.DevicePrimaryCtxReset(cudadrv.Device(dev)))
}

//export cuDevicePrimaryCtxGetState
func cuDevicePrimaryCtxGetState(dev C.CUdevice, flags *C.uint, active *C.int) C.CUresult {
	if flags == nil || active == nil {
		return errInvalid
	}
	f, a, res := lib.DevicePrimaryCtxGetState(cudadrv.Device(dev))
	*flags, *active = C.uint(f), 0
	if a {
		*active = 1
	}
	return r(res)
}

//export cuDevicePrimaryCtxSetFlags_v2
func cuDevicePrimaryCtxSetFlags_v2(dev C.CUdevice, flags C.uint) C.CUresult {
	return r(lib.DevicePrimaryCtxSetFlags(cudadrv.Device(dev), uint32(flags)))
}

//export cuCtxCreate_v2
func cuCtxCreate_v2(ctx *C.CUcontext, flags C.uint, dev C.CUdevice) C.CUresult {
	if ctx == nil {
		return errInvalid
	}
	c, res := lib.CtxCreate(thread(), uint32(flags), cudadrv.Device(dev))
	*ctx = C.CUcontext(p(c))
	return r(res)
}

//export cuCtxDestroy_v2
func cuCtxDestroy_v2(ctx C.CUcontext) C.CUresult { return r(lib.CtxDestroy(h(unsafe.Pointer(ctx)))) }

//export cuCtxPushCurrent_v2
func cuCtxPushCurrent_v2(ctx C.CUcontext) C.CUresult {
	return r(lib.CtxPushCurrent(thread(), h(unsafe.Pointer(ctx))))
}

//export cuCtxPopCurrent_v2
func cuCtxPopCurrent_v2(ctx *C.CUcontext) C.CUresult {
	c, res := lib.CtxPopCurrent(thread())
	if ctx != nil {
		*ctx = C.CUcontext(p(c))
	}
	return r(res)
}

//export cuCtxSetCurrent
func cuCtxSetCurrent(ctx C.CUcontext) C.CUresult {
	return r(lib.CtxSetCurrent(thread(), h(unsafe.Pointer(ctx))))
}

//export cuCtxGetCurrent
func cuCtxGetCurrent(ctx *C.CUcontext) C.CUresult {
	if ctx == nil {
		return errInvalid
	}
	c, res := lib.CtxGetCurrent(thread())
	*ctx = C.CUcontext(p(c))
	return r(res)
}

//export cuCtxGetDevice
func cuCtxGetDevice(dev *C.CUdevice) C.CUresult {
	if dev == nil {
		return errInvalid
	}
	d, res := lib.CtxGetDevice(thread())
	*dev = C.CUdevice(d)
	return r(res)
}

//export cuCtxSynchronize
func cuCtxSynchronize() C.CUresult { return r(lib.CtxSynchronize(thread())) }

//export cuMemAlloc_v2
func cuMemAlloc_v2(ptr *C.CUdeviceptr, n C.size_t) C.CUresult {
	if ptr == nil {
		return errInvalid
	}
	ga, res := lib.MemAlloc(thread(), uint64(n))
	*ptr = C.CUdeviceptr(ga)
	return r(res)
}

//export cuMemFree_v2
func cuMemFree_v2(ptr C.CUdeviceptr) C.CUresult { return r(lib.MemFree(thread(), uint64(ptr))) }

//export cuMemGetInfo_v2
func cuMemGetInfo_v2(free, total *C.size_t) C.CUresult {
	if free == nil || total == nil {
		return errInvalid
	}
	f, t, res := lib.MemGetInfo(thread())
	*free, *total = C.size_t(f), C.size_t(t)
	return r(res)
}

//export cuMemGetAddressRange_v2
func cuMemGetAddressRange_v2(base *C.CUdeviceptr, size *C.size_t, ptr C.CUdeviceptr) C.CUresult {
	b, s, res := lib.MemGetAddressRange(thread(), uint64(ptr))
	if base != nil {
		*base = C.CUdeviceptr(b)
	}
	if size != nil {
		*size = C.size_t(s)
	}
	return r(res)
}
