package guest

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/gmig-dev/gmig/abi"
)

// Reference computations for the commands (docs/device-abi.md §6) and
// kernels (§7) in plain Go, over a byte slice that models graphics memory:
// mem[ga] is the byte at graphics address ga. Float kernels round to
// binary32 after every operation (an explicit float32 conversion stops Go
// from fusing a multiply and an add), as the ABI requires of every back end.
// Arguments are assumed valid; the device's refusals are not modelled.

// StencilWeight is the 0.2f of the STENCIL kernel (§7.2).
const StencilWeight = float32(0.2)

// RefCopy applies COPY: n bytes from src to dst, memmove semantics.
func RefCopy(mem []byte, dst, src, n uint64) { copy(mem[dst:dst+n], mem[src:src+n]) }

// RefFill applies FILL: n bytes (a multiple of 4) at dst with pattern.
func RefFill(mem []byte, dst, n uint64, pattern uint32) {
	for i := dst; i < dst+n; i += 4 {
		binary.LittleEndian.PutUint32(mem[i:], pattern)
	}
}

// RefDMAToGfx applies DMA_TO_GFX: data (guest RAM) lands at ga.
func RefDMAToGfx(mem []byte, ga uint64, data []byte) { copy(mem[ga:], data) }

// RefDMAFromGfx applies DMA_FROM_GFX: n bytes at ga, as they land in RAM.
func RefDMAFromGfx(mem []byte, ga, n uint64) []byte { return append([]byte(nil), mem[ga:ga+n]...) }

// RefFenceWrite applies FENCE with FenceWriteMem: value at addr.
func RefFenceWrite(mem []byte, addr, value uint64) { binary.LittleEndian.PutUint64(mem[addr:], value) }

// CanonicalNaN is the bit pattern of every NaN a kernel computes (§7):
// IEEE leaves a computed NaN's payload open, the ABI fixes it.
const CanonicalNaN = 0x7fffffff

// canon replaces a NaN by the canonical one.
func canon(v float32) float32 {
	if v != v {
		return math.Float32frombits(CanonicalNaN)
	}
	return v
}

// SaxpyElem is one SAXPY element: (a * x) + y, each operation rounded; a
// NaN result is the canonical NaN.
func SaxpyElem(a, x, y float32) float32 { return canon(float32(float32(a*x) + y)) }

// StencilCell is one interior STENCIL cell:
// ((((c + n) + s) + w) + e) * 0.2f, each operation rounded; a NaN result
// is the canonical NaN.
func StencilCell(c, n, s, w, e float32) float32 {
	sum := float32(float32(float32(float32(c+n)+s)+w) + e)
	return canon(float32(sum * StencilWeight))
}

// RenderPixel is pixel (x, y) of RENDER frame: r = x + t, g = y + 2t,
// b = (x xor y) + 3t, a = 255, all mod 256, packed r | g<<8 | b<<16 | a<<24.
func RenderPixel(x, y uint32, frame uint64) uint32 {
	t := uint32(frame)
	r := uint8(x + t)
	g := uint8(y + 2*t)
	b := uint8((x ^ y) + 3*t)
	return uint32(r) | uint32(g)<<8 | uint32(b)<<16 | 255<<24
}

func loadF32(mem []byte, ga uint64) float32 {
	return math.Float32frombits(binary.LittleEndian.Uint32(mem[ga:]))
}

// storeF32 stores a computed value; NaNs are stored canonical.
func storeF32(mem []byte, ga uint64, v float32) {
	bits := math.Float32bits(v)
	if v != v {
		bits = CanonicalNaN
	}
	binary.LittleEndian.PutUint32(mem[ga:], bits)
}

// RefSaxpy applies a SAXPY launch: y[i] = a*x[i] + y[i] for i < n.
func RefSaxpy(mem []byte, n uint64, a float32, x, y uint64) {
	for i := uint64(0); i < n; i++ {
		storeF32(mem, y+4*i, SaxpyElem(a, loadF32(mem, x+4*i), loadF32(mem, y+4*i)))
	}
}

// RefStencil applies a STENCIL launch: one Jacobi step of the w x h grid
// at in into out; border cells are copied.
func RefStencil(mem []byte, w, h uint32, in, out uint64) {
	at := func(x, y uint32) uint64 { return 4 * (uint64(y)*uint64(w) + uint64(x)) }
	for y := uint32(0); y < h; y++ {
		for x := uint32(0); x < w; x++ {
			i := at(x, y)
			if x == 0 || y == 0 || x == w-1 || y == h-1 {
				copy(mem[out+i:out+i+4], mem[in+i:in+i+4])
				continue
			}
			v := StencilCell(loadF32(mem, in+i), loadF32(mem, in+at(x, y-1)), loadF32(mem, in+at(x, y+1)),
				loadF32(mem, in+at(x-1, y)), loadF32(mem, in+at(x+1, y)))
			storeF32(mem, out+i, v)
		}
	}
}

// RefRender applies a RENDER launch: frame of the w x h framebuffer at fb.
func RefRender(mem []byte, w, h uint32, fb, frame uint64) {
	for y := uint32(0); y < h; y++ {
		for x := uint32(0); x < w; x++ {
			binary.LittleEndian.PutUint32(mem[fb+4*(uint64(y)*uint64(w)+uint64(x)):], RenderPixel(x, y, frame))
		}
	}
}

// RefLaunch applies a LAUNCH of a kernel of kind with args (§7).
func RefLaunch(mem []byte, kind uint32, args []uint64) error {
	if len(args) != 4 {
		return fmt.Errorf("guest: kernel kind %d takes 4 arguments, got %d", kind, len(args))
	}
	switch kind {
	case abi.KernelSaxpy:
		RefSaxpy(mem, args[0], math.Float32frombits(uint32(args[1])), args[2], args[3])
	case abi.KernelStencil:
		RefStencil(mem, uint32(args[0]), uint32(args[1]), args[2], args[3])
	case abi.KernelRender:
		RefRender(mem, uint32(args[0]), uint32(args[1]), args[2], args[3])
	default:
		return fmt.Errorf("guest: unknown kernel kind %d", kind)
	}
	return nil
}
