package dirty

import (
	"encoding/binary"
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"unsafe"
)

// randMem returns pages pages of seeded random bytes, 8-byte aligned.
func randMem(tb testing.TB, pages int, seed uint64) []byte {
	tb.Helper()
	mem := make([]byte, pages*PageSize)
	if uintptr(unsafe.Pointer(&mem[0]))%8 != 0 {
		tb.Fatal("test memory is not 8-byte aligned")
	}
	r := rand.New(rand.NewPCG(seed, 1))
	for i := 0; i < len(mem); i += 8 {
		binary.NativeEndian.PutUint64(mem[i:], r.Uint64())
	}
	return mem
}

// storeByte sets mem[off] = v with a 64-bit atomic compare-and-swap of the
// aligned word holding it. The tracker reads with 64-bit atomic loads under
// the race detector, so this is how tests write graphics memory while the
// tracker runs (see the package comment).
func storeByte(mem []byte, off int, v byte) {
	w := (*uint64)(unsafe.Pointer(&mem[off&^7]))
	for {
		old := atomic.LoadUint64(w)
		var b [8]byte
		binary.NativeEndian.PutUint64(b[:], old)
		b[off&7] = v
		if atomic.CompareAndSwapUint64(w, old, binary.NativeEndian.Uint64(b[:])) {
			return
		}
	}
}
