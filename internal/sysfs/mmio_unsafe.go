package sysfs

import (
	"sync/atomic"
	"unsafe"
)

// Register accesses must be exactly one load or store of the access's width,
// never merged, split or elided: each traps to the device. atomic loads
// compile to a plain MOV on amd64; stores go through a function the
// compiler may not inline, so they are not elided or combined.

func load32(b []byte, off uint32) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[off])))
}

func load64(b []byte, off uint32) uint64 {
	return atomic.LoadUint64((*uint64)(unsafe.Pointer(&b[off])))
}

//go:noinline
func store32(b []byte, off uint32, v uint32) {
	*(*uint32)(unsafe.Pointer(&b[off])) = v
}

//go:noinline
func store64(b []byte, off uint32, v uint64) {
	*(*uint64)(unsafe.Pointer(&b[off])) = v
}
