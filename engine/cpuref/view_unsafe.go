package cpuref

import (
	"encoding/binary"
	"unsafe"
)

// littleEndian is true when host words have the ABI's byte order, so that
// graphics memory can be used in place as float32s and uint32s.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// F32View returns b as float32s in place when the host is little-endian,
// b is 4-byte aligned and len(b) is a multiple of 4; otherwise nil.
func F32View(b []byte) []float32 {
	if !wordView(b) {
		return nil
	}
	return unsafe.Slice((*float32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

// U32View is F32View for uint32 words.
func U32View(b []byte) []uint32 {
	if !wordView(b) {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(b))), len(b)/4)
}

func wordView(b []byte) bool {
	return littleEndian && len(b) > 0 && len(b)%4 == 0 &&
		uintptr(unsafe.Pointer(unsafe.SliceData(b)))%4 == 0
}

// F32Bytes returns the bytes of f in place (host byte order).
func F32Bytes(f []float32) []byte {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(f))), 4*len(f))
}

// SwapWords converts between little-endian words and host words in place;
// a no-op on little-endian hosts.
func SwapWords(b []byte) {
	if littleEndian {
		return
	}
	for i := 0; i+4 <= len(b); i += 4 {
		b[i], b[i+1], b[i+2], b[i+3] = b[i+3], b[i+2], b[i+1], b[i]
	}
}

// F32AsU32 reinterprets float32 scratch as uint32 words in place.
func F32AsU32(f []float32) []uint32 {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*uint32)(unsafe.Pointer(unsafe.SliceData(f))), len(f))
}
