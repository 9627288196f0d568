package guest

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"
)

// loadLE64 loads the little-endian 8 bytes at p[0:8] with one 8-byte load
// where p is 8-byte aligned (a device's store of them is then seen whole or
// not at all: the aperture is memory the device writes while the CPU
// reads), byte by byte otherwise.
func loadLE64(p []byte) uint64 {
	_ = p[7]
	ptr := unsafe.Pointer(unsafe.SliceData(p))
	if uintptr(ptr)%8 != 0 {
		return binary.LittleEndian.Uint64(p)
	}
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], atomic.LoadUint64((*uint64)(ptr)))
	return binary.LittleEndian.Uint64(b[:])
}
