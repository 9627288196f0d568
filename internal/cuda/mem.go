package cuda

import (
	"fmt"
	"unsafe"
)

// Alloc allocates size bytes of linear device memory (cuMemAlloc).
func (dv *Device) Alloc(size uint64) (DevPtr, error) {
	var p DevPtr
	err := dv.do("cuMemAlloc", func() Result { return dv.d.fn.cuMemAlloc(&p, uintptr(size)) })
	return p, err
}

// Free frees memory from Alloc.
func (dv *Device) Free(p DevPtr) error {
	return dv.do("cuMemFree", func() Result { return dv.d.fn.cuMemFree(p) })
}

// AllocHost allocates size bytes of page-locked host memory that the
// device can reach at DMA speed (cuMemAllocHost: a pinned staging buffer).
// The slice is valid until FreeHost.
func (dv *Device) AllocHost(size uint64) ([]byte, error) {
	if size == 0 {
		return nil, fmt.Errorf("cuda: AllocHost of 0 bytes")
	}
	var p unsafe.Pointer
	if err := dv.do("cuMemAllocHost", func() Result { return dv.d.fn.cuMemAllocHost(&p, uintptr(size)) }); err != nil {
		return nil, err
	}
	return unsafe.Slice((*byte)(p), size), nil
}

// FreeHost frees a buffer from AllocHost.
func (dv *Device) FreeHost(b []byte) error {
	if len(b) == 0 {
		return nil
	}
	return dv.do("cuMemFreeHost", func() Result { return dv.d.fn.cuMemFreeHost(unsafe.Pointer(&b[0])) })
}

// Host registration flags (cuda.h, CU_MEMHOSTREGISTER_*).
const (
	registerPortable  = 0x01
	registerDeviceMap = 0x02
)

// HostRegister page-locks b (which must be page aligned and whole pages,
// and stay mapped and alive until HostUnregister) and maps it into the
// device's address space; it returns the device address of b[0]. Device
// reads and writes of that address go over PCIe to b itself: coherent with
// every CPU mapping of the same memory (a shared memfd included).
func (dv *Device) HostRegister(b []byte) (DevPtr, error) {
	if len(b) == 0 {
		return 0, fmt.Errorf("cuda: HostRegister of an empty range")
	}
	p := unsafe.Pointer(&b[0])
	if err := dv.do("cuMemHostRegister", func() Result {
		return dv.d.fn.cuMemHostRegister(p, uintptr(len(b)), registerPortable|registerDeviceMap)
	}); err != nil {
		return 0, err
	}
	var dp DevPtr
	if err := dv.do("cuMemHostGetDevicePointer", func() Result { return dv.d.fn.cuMemHostGetDevicePointer(&dp, p, 0) }); err != nil {
		_ = dv.HostUnregister(b)
		return 0, err
	}
	return dp, nil
}

// HostUnregister undoes HostRegister.
func (dv *Device) HostUnregister(b []byte) error {
	return dv.do("cuMemHostUnregister", func() Result { return dv.d.fn.cuMemHostUnregister(unsafe.Pointer(&b[0])) })
}

// CopyHtoD queues a copy of src to dst on s; src must stay untouched until
// s is synchronised.
func (dv *Device) CopyHtoD(dst DevPtr, src []byte, s Stream) error {
	if len(src) == 0 {
		return nil
	}
	return dv.do("cuMemcpyHtoDAsync", func() Result {
		return dv.d.fn.cuMemcpyHtoDAsync(dst, unsafe.Pointer(&src[0]), uintptr(len(src)), s)
	})
}

// CopyDtoH queues a copy of len(dst) bytes at src into dst on s; dst must
// not be read until s is synchronised.
func (dv *Device) CopyDtoH(dst []byte, src DevPtr, s Stream) error {
	if len(dst) == 0 {
		return nil
	}
	return dv.do("cuMemcpyDtoHAsync", func() Result {
		return dv.d.fn.cuMemcpyDtoHAsync(unsafe.Pointer(&dst[0]), src, uintptr(len(dst)), s)
	})
}

// CopyDtoD queues a device-to-device copy of n bytes on s (the ranges must
// not overlap).
func (dv *Device) CopyDtoD(dst, src DevPtr, n uint64, s Stream) error {
	if n == 0 {
		return nil
	}
	return dv.do("cuMemcpyDtoDAsync", func() Result { return dv.d.fn.cuMemcpyDtoDAsync(dst, src, uintptr(n), s) })
}

// Memset32 queues n 32-bit stores of v at dst (4-byte aligned) on s.
func (dv *Device) Memset32(dst DevPtr, v uint32, n uint64, s Stream) error {
	if n == 0 {
		return nil
	}
	return dv.do("cuMemsetD32Async", func() Result { return dv.d.fn.cuMemsetD32Async(dst, v, uintptr(n), s) })
}

// Memset8 queues n byte stores of v at dst on s.
func (dv *Device) Memset8(dst DevPtr, v uint8, n uint64, s Stream) error {
	if n == 0 {
		return nil
	}
	return dv.do("cuMemsetD8Async", func() Result { return dv.d.fn.cuMemsetD8Async(dst, v, uintptr(n), s) })
}

// AllocHostMapped is AllocHost for memory the device also reads and writes
// directly, over PCIe, at the returned device address (small tables and
// results, not bulk data).
func (dv *Device) AllocHostMapped(size uint64) ([]byte, DevPtr, error) {
	b, err := dv.AllocHost(size)
	if err != nil {
		return nil, 0, err
	}
	var dp DevPtr
	if err := dv.do("cuMemHostGetDevicePointer", func() Result {
		return dv.d.fn.cuMemHostGetDevicePointer(&dp, unsafe.Pointer(&b[0]), 0)
	}); err != nil {
		_ = dv.FreeHost(b)
		return nil, 0, err
	}
	return b, dp, nil
}
