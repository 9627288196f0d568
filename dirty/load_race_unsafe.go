//go:build race

package dirty

import (
	"encoding/binary"
	"sync/atomic"
	"unsafe"
)

// Under the race detector, graphics memory is read with 64-bit atomic loads
// so that tests may write it concurrently with 64-bit atomic stores (see the
// package comment). Production builds use load.go's plain reads.

func aligned(b []byte) bool { return uintptr(unsafe.Pointer(unsafe.SliceData(b)))%8 == 0 }

func word(b []byte, off int) *uint64 { return (*uint64)(unsafe.Pointer(&b[off])) }

// copyPage copies src into dst, a word at a time with atomic loads when src
// is 8-byte aligned.
func copyPage(dst, src []byte) {
	if !aligned(src) || len(src)%8 != 0 {
		copy(dst, src)
		return
	}
	for off := 0; off < len(src); off += 8 {
		binary.NativeEndian.PutUint64(dst[off:], atomic.LoadUint64(word(src, off)))
	}
}

// loadWord returns the 64-bit word at byte offset off of mem, atomically
// when it is 8-byte aligned.
func loadWord(mem []byte, off int) uint64 {
	_ = mem[off+7]
	if !aligned(mem[off:]) {
		return binary.NativeEndian.Uint64(mem[off:])
	}
	return atomic.LoadUint64(word(mem, off))
}
