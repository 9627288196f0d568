package guest

import (
	"encoding/binary"
	"math"
	"testing"
)

func f32s(mem []byte, ga uint64, vs ...float32) {
	for i, v := range vs {
		binary.LittleEndian.PutUint32(mem[ga+4*uint64(i):], math.Float32bits(v))
	}
}

func readF32s(mem []byte, ga uint64, n int) []float32 {
	out := make([]float32, n)
	for i := range out {
		out[i] = math.Float32frombits(binary.LittleEndian.Uint32(mem[ga+4*uint64(i):]))
	}
	return out
}

func TestRefSaxpy(t *testing.T) {
	mem := make([]byte, 64)
	f32s(mem, 0, 1, 2, -3, 0.5)
	f32s(mem, 16, 10, 20, 30, 0.25)
	RefSaxpy(mem, 3, 2, 0, 16) // n=3 leaves y[3] alone
	want := []float32{12, 24, 24, 0.25}
	if got := readF32s(mem, 16, 4); !equalF32(got, want) {
		t.Fatalf("saxpy: %v, want %v", got, want)
	}
}

// TestSaxpyRoundsTwice checks the no-FMA rule with a case where a fused
// multiply-add gives a different answer: a*x is rounded before adding y.
func TestSaxpyRoundsTwice(t *testing.T) {
	a := float32(1 + 1.0/(1<<12)) // 1 + 2^-12
	x := float32(1 + 1.0/(1<<12)) // a*x = 1 + 2^-11 + 2^-24, rounds to 1 + 2^-11
	y := float32(-(1 + 1.0/(1<<11)))
	if got := SaxpyElem(a, x, y); got != 0 {
		t.Fatalf("SaxpyElem = %g (%#x), want 0 (fused would give 2^-24)", got, math.Float32bits(got))
	}
	fused := float32(math.FMA(float64(a), float64(x), float64(y)))
	if fused == 0 {
		t.Fatalf("test case does not distinguish fused from unfused")
	}
}

func TestRefStencil(t *testing.T) {
	// 3x3 grid: one interior cell (1,1).
	mem := make([]byte, 2*36)
	f32s(mem, 0,
		1, 2, 3,
		4, 5, 6,
		7, 8, 9)
	RefStencil(mem, 3, 3, 0, 36)
	got := readF32s(mem, 36, 9)
	// (((5+2)+8)+4)+6 = 25, * 0.2f
	center := float32(float32(25) * float32(0.2))
	want := []float32{1, 2, 3, 4, center, 6, 7, 8, 9}
	if !equalF32(got, want) {
		t.Fatalf("stencil: %v, want %v", got, want)
	}
	if center != 5 {
		t.Fatalf("25*0.2f = %g, want 5", center)
	}
	// A 1-wide grid is all border.
	mem2 := make([]byte, 32)
	f32s(mem2, 0, 1, 2)
	RefStencil(mem2, 1, 2, 0, 16)
	if got := readF32s(mem2, 16, 2); !equalF32(got, []float32{1, 2}) {
		t.Fatalf("1x2 stencil: %v", got)
	}
}

func TestStencilCellOrder(t *testing.T) {
	// Additions go c+n, +s, +w, +e, each rounded: 1e8+4 rounds back to 1e8
	// (ulp 8, tie to even) twice, so the 4s vanish; adding -1e8 first would
	// keep them and give 8*0.2f.
	if got := StencilCell(1e8, 4, 4, -1e8, 0); got != 0 {
		t.Fatalf("StencilCell(1e8, 4, 4, -1e8, 0) = %g, want 0", got)
	}
	if got := StencilCell(1e8, -1e8, 4, 4, 0); got != float32(8*float32(0.2)) {
		t.Fatalf("StencilCell(1e8, -1e8, 4, 4, 0) = %g, want 1.6", got)
	}
}

func TestRefRender(t *testing.T) {
	mem := make([]byte, 4*4*2)
	RefRender(mem, 4, 2, 0, 0x101) // t mod 256 = 1 for r, g uses 2t, b 3t
	px := func(x, y int) uint32 { return binary.LittleEndian.Uint32(mem[4*(y*4+x):]) }
	if got, want := px(0, 0), uint32(0xff030201); got != want {
		t.Errorf("pixel (0,0) = %#x, want %#x", got, want)
	}
	// (3,1): r = 3+1 = 4, g = 1+2 = 3, b = (3^1)+3 = 5.
	if got, want := px(3, 1), uint32(0xff050304); got != want {
		t.Errorf("pixel (3,1) = %#x, want %#x", got, want)
	}
	// Wrap mod 256: x=255, t=1 -> r=0.
	if got := RenderPixel(255, 0, 1) & 0xff; got != 0 {
		t.Errorf("r wraps: %#x", got)
	}
}

func TestRefCopyFill(t *testing.T) {
	mem := []byte("abcdefghij")
	RefCopy(mem, 2, 0, 5) // overlapping forward: memmove
	if string(mem) != "ababcdehij" {
		t.Fatalf("copy forward overlap: %q", mem)
	}
	RefCopy(mem, 0, 3, 5) // overlapping backward
	if string(mem) != "bcdehdehij" {
		t.Fatalf("copy backward overlap: %q", mem)
	}
	m := make([]byte, 12)
	RefFill(m, 4, 8, 0x04030201)
	if want := []byte{0, 0, 0, 0, 1, 2, 3, 4, 1, 2, 3, 4}; string(m) != string(want) {
		t.Fatalf("fill: % x", m)
	}
}

func equalF32(a, b []float32) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			return false
		}
	}
	return true
}

// TestRefCanonicalNaN checks that computed NaNs take the canonical bits
// while copied border cells keep theirs.
func TestRefCanonicalNaN(t *testing.T) {
	payload := math.Float32frombits(0x7fc01234)
	inf := float32(math.Inf(1))
	if got := math.Float32bits(SaxpyElem(2, payload, 1)); got != CanonicalNaN {
		t.Errorf("saxpy of a NaN: %#x", got)
	}
	if got := math.Float32bits(SaxpyElem(0, inf, 1)); got != CanonicalNaN {
		t.Errorf("0*inf: %#x", got)
	}
	if got := math.Float32bits(StencilCell(inf, float32(math.Inf(-1)), 0, 0, 0)); got != CanonicalNaN {
		t.Errorf("inf-inf: %#x", got)
	}
	mem := make([]byte, 2*36)
	f32s(mem, 0, payload, 0, 0, 0, payload, 0, 0, 0, 0)
	RefStencil(mem, 3, 3, 0, 36)
	if got := binary.LittleEndian.Uint32(mem[36:]); got != 0x7fc01234 {
		t.Errorf("border NaN copied as %#x", got)
	}
	if got := binary.LittleEndian.Uint32(mem[36+16:]); got != CanonicalNaN {
		t.Errorf("interior NaN stored as %#x", got)
	}
}
