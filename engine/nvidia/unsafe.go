package nvidia

import "unsafe"

// pieceTable views pinned host memory as a table of pieces, the layout
// kernels.cu's struct piece has (three little-endian u64s).
func pieceTable(raw []byte) []nvPiece {
	return unsafe.Slice((*nvPiece)(unsafe.Pointer(unsafe.SliceData(raw))), len(raw)/int(unsafe.Sizeof(nvPiece{})))
}

// u64Words views pinned host memory as 64-bit words.
func u64Words(raw []byte) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(raw))), len(raw)/8)
}

// u32Words views pinned host memory as 32-bit words.
func u32Words(raw []byte) []uint32 {
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(raw))), len(raw)/4)
}

// inBulk reports whether p lies in the registered bulk buffer
// (NVIDIAConfig.Bulk): copies from and into it may run straight across
// PCIe.
func (b *NVIDIA) inBulk(p []byte) bool {
	if b.bulk == 0 || len(p) == 0 {
		return false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(b.cfg.Bulk)))
	q := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	return q >= base && q-base <= uintptr(len(b.cfg.Bulk)) && uintptr(len(p)) <= uintptr(len(b.cfg.Bulk))-(q-base)
}
