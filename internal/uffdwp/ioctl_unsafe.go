//go:build linux

package uffdwp

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// This file holds the package's ioctls, which pass pointers to the kernel.

// ioctl issues req on fd with arg, a pointer to the request's struct.
func ioctl(fd int, req uintptr, arg unsafe.Pointer) (uintptr, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(arg))
	if errno != 0 {
		return 0, errno
	}
	return r, nil
}

// uffdAPIIoctl is UFFDIO_API.
func uffdAPIIoctl(fd int, a *uffdioAPI) error {
	_, err := ioctl(fd, ioctlUffdioAPI, unsafe.Pointer(a))
	return err
}

// uffdRegisterIoctl is UFFDIO_REGISTER.
func uffdRegisterIoctl(fd int, r *uffdioRegister) error {
	_, err := ioctl(fd, ioctlUffdioRegister, unsafe.Pointer(r))
	return err
}

// uffdUnregisterIoctl is UFFDIO_UNREGISTER.
func uffdUnregisterIoctl(fd int, r *uffdioRange) error {
	_, err := ioctl(fd, ioctlUffdioUnregister, unsafe.Pointer(r))
	return err
}

// addrOf is the address of mem's first byte in this process (0 for an
// empty slice).
func addrOf(mem []byte) uint64 {
	return uint64(uintptr(unsafe.Pointer(unsafe.SliceData(mem))))
}

// pagemapScan is PAGEMAP_SCAN on a pagemap descriptor, with vec (may be
// empty) for the regions found; it returns how many regions it filled.
func pagemapScan(fd int, a *pmScanArg, vec []pageRegion) (int, error) {
	a.Size = uint64(unsafe.Sizeof(*a))
	a.Vec, a.VecLen = 0, 0
	if len(vec) > 0 {
		a.Vec, a.VecLen = uint64(uintptr(unsafe.Pointer(&vec[0]))), uint64(len(vec))
	}
	n, err := ioctl(fd, ioctlPagemapScan, unsafe.Pointer(a))
	runtime.KeepAlive(vec)
	return int(n), err
}
