//go:build !race

package dirty

import "encoding/binary"

// copyPage copies src, a page of graphics memory that others may be writing,
// into dst with a plain copy.
func copyPage(dst, src []byte) { copy(dst, src) }

// loadWord returns the 64-bit word at byte offset off of mem, which others
// may be writing, with a plain load.
func loadWord(mem []byte, off int) uint64 { return binary.NativeEndian.Uint64(mem[off:]) }
