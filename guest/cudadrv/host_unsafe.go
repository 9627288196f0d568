package cudadrv

import "unsafe"

// addressOf is the address of b's first byte: the host pointer a program
// holds for a host allocation (b is a mapping outside Go's heap).
func addressOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
