// Package cpuref holds what every engine back end shares: the device's
// kernels in plain Go, bit for bit as docs/device-abi.md §7 defines them
// (the software back end runs them; the NVIDIA back end's device model
// stands in for its GPU kernels with them), the kernel size limit, and the
// checks of host extents (bounds, aliasing) both back ends apply before
// they touch memory. A leaf: of gmig it imports only gtt.
package cpuref

import (
	"fmt"
	"math"
)

// MaxKernelBuffer is the largest buffer a kernel may touch, in bytes
// (a gmig limit; it also keeps every size computation far from overflow).
const MaxKernelBuffer = 1 << 30

// FillBytes writes pat repeatedly over b, b[0] being pat[phase].
func FillBytes(b []byte, pat [4]byte, phase int) {
	seed := min(len(b), 64)
	for i := range seed {
		b[i] = pat[(phase+i)%4]
	}
	for done := seed; done < len(b); {
		done += copy(b[done:], b[:done]) // done stays a multiple of 4
	}
}

// WordBytes returns 4*n, or an error when it does not fit the 1 GiB kernel
// buffer limit (which also rules out overflow).
func WordBytes(n uint64) (uint64, error) {
	if n > MaxKernelBuffer/4 {
		return 0, fmt.Errorf("%w: %d elements exceed the %d-byte buffer limit", ErrBounds, n, MaxKernelBuffer)
	}
	return 4 * n, nil
}

// Saxpy is docs/device-abi.md §7.1: each operation rounded to binary32, no
// fused multiply-add (the explicit conversions forbid fusion).
func Saxpy(a float32, x, y []float32) {
	y = y[:len(x)]
	for i, xv := range x {
		y[i] = canon(float32(float32(a*xv) + y[i]))
	}
}

// canonNaNBits is the only NaN the kernels compute. IEEE 754 leaves the payload
// of a NaN result open, and on x86 it depends on which operand the compiler
// put first; NVIDIA GPUs always produce this one, so fixing it here keeps
// back ends (and builds) bit-identical. Copied values keep their bits.
const canonNaNBits = 0x7fffffff

// canon replaces any NaN by the canonical one.
func canon(v float32) float32 {
	if v != v {
		return math.Float32frombits(canonNaNBits)
	}
	return v
}

// GridBytes returns w*h*4 for a kernel grid or framebuffer, or an error when
// it exceeds the kernel buffer limit.
func GridBytes(w, h uint32) (uint64, error) {
	cells := uint64(w) * uint64(h) // cannot overflow: both < 2^32
	return WordBytes(cells)
}

// fifth is the 0.2f of docs/device-abi.md §7.2, rounded to binary32.
const fifth float32 = 0.2

// StencilRows computes output rows [r0, r1) of the w x h stencil (§7.2).
// in holds input rows from inLo on (at least rows r0-1..r1 that exist), out
// holds rows r0..r1-1.
func StencilRows(w, h, r0, r1 int, in []float32, inLo int, out []float32) {
	for y := r0; y < r1; y++ {
		o := out[(y-r0)*w : (y-r0+1)*w]
		c := in[(y-inLo)*w : (y-inLo+1)*w]
		if y == 0 || y == h-1 || w < 3 {
			copy(o, c)
			continue
		}
		n := in[(y-1-inLo)*w : (y-inLo)*w]
		s := in[(y+1-inLo)*w : (y+2-inLo)*w]
		o[0], o[w-1] = c[0], c[w-1]
		for x := 1; x < w-1; x++ {
			v := float32(c[x] + n[x])
			v = float32(v + s[x])
			v = float32(v + c[x-1])
			v = float32(v + c[x+1])
			o[x] = canon(float32(v * fifth))
		}
	}
}

// RenderPixels writes pixels p0.. of a framebuffer w pixels wide for frame
// t (docs/device-abi.md §7.3) into px.
func RenderPixels(w uint32, p0 uint64, t uint32, px []uint32) {
	x, y := uint32(p0%uint64(w)), uint32(p0/uint64(w))
	for i := 0; i < len(px); {
		g := (y + 2*t) & 0xff
		row := px[i:min(len(px), i+int(w-x))]
		for j := range row {
			xx := x + uint32(j)
			r := (xx + t) & 0xff
			b := ((xx ^ y) + 3*t) & 0xff
			row[j] = r | g<<8 | b<<16 | 0xff<<24
		}
		i += len(row)
		x, y = 0, y+1
	}
}
