//go:build linux

package uffdwp

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// remapInPlace maps fd over mem again (MAP_FIXED): a new mapping at the
// same address, which no userfaultfd registered.
func remapInPlace(mem []byte, fd int) error {
	_, err := unix.MmapPtr(fd, 0, unsafe.Pointer(&mem[0]), uintptr(len(mem)),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED)
	return err
}
