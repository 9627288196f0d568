package memprobe

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Resident returns how many of b's pages (of the system's page size)
// hold memory now, as mincore(2) reports it: a page that was never
// touched, or was given back to the kernel (MADV_DONTNEED, a punched
// hole), is not resident; one only read since maps the kernel's shared
// zero page and counts as resident though it holds no memory of its own.
// b must start on a page boundary.
func Resident(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	page := unix.Getpagesize()
	vec := make([]byte, (len(b)+page-1)/page)
	// golang.org/x/sys/unix has no Mincore for Linux: the raw call.
	_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(unsafe.SliceData(b))),
		uintptr(len(b)), uintptr(unsafe.Pointer(unsafe.SliceData(vec))))
	if errno != 0 {
		return 0, fmt.Errorf("memprobe: mincore over %d bytes: %w", len(b), errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n, nil
}
