package engine

import (
	"bytes"
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gmig-dev/gmig/engine/cpuref"
	"github.com/gmig-dev/gmig/gtt"
)

// placer hands out disjoint host ranges of a pool in random order, so that a
// logical buffer becomes extents that are fragmented and out of order.
type placer struct {
	rng   *rand.Rand
	slots []uint64 // free 4 KiB slots, shuffled
}

func newPlacer(rng *rand.Rand, poolSize uint64) *placer {
	p := &placer{rng: rng}
	for s := uint64(0); s+4096 <= poolSize; s += 4096 {
		p.slots = append(p.slots, s)
	}
	rng.Shuffle(len(p.slots), func(i, j int) { p.slots[i], p.slots[j] = p.slots[j], p.slots[i] })
	return p
}

// place returns extents for n bytes: pieces of 1..4096 bytes (multiples of
// align), each in its own slot at a random aligned offset.
func (p *placer) place(n, align uint64) []gtt.Extent {
	var xs []gtt.Extent
	for n > 0 {
		l := min(n, align*(1+p.rng.Uint64N(4096/align)))
		slot := p.slots[0]
		p.slots = p.slots[1:]
		off := align * p.rng.Uint64N((4096-l)/align+1)
		xs = append(xs, gtt.Extent{Off: slot + off, Len: l})
		n -= l
	}
	return xs
}

func randBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// randFloats fills b with float32s of moderate magnitude (no NaNs, so that
// comparisons of bits are meaningful either way).
func randFloats(rng *rand.Rand, b []byte) {
	for i := 0; i+4 <= len(b); i += 4 {
		le.PutUint32(b[i:], math.Float32bits(float32(rng.NormFloat64()*100)))
	}
}

func TestSoftwareCopyFillReadWrite(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 20 {
		mem := randBytes(rng, 1<<20)
		sw := NewSoftware(mem)
		pl := newPlacer(rng, uint64(len(mem)))
		n := 1 + rng.Uint64N(20000)
		src, dst := pl.place(n, 1), pl.place(n, 1)
		want := make([]byte, n)
		gather(want, mem, src)
		if err := sw.Copy(dst, src); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, n)
		if err := sw.Read(got, dst); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d: copy differs", round)
		}

		data := randBytes(rng, int(n))
		if err := sw.Write(src, data); err != nil {
			t.Fatal(err)
		}
		gather(got, mem, src)
		if !bytes.Equal(got, data) {
			t.Fatalf("round %d: write differs", round)
		}

		fn := 4 * (1 + rng.Uint64N(5000))
		fx := pl.place(fn, 4)
		pat := rng.Uint32()
		if err := sw.Fill(fx, pat); err != nil {
			t.Fatal(err)
		}
		fb := make([]byte, fn)
		gather(fb, mem, fx)
		for i := uint64(0); i < fn; i += 4 {
			if le.Uint32(fb[i:]) != pat {
				t.Fatalf("round %d: fill word %d = %#x, want %#x", round, i/4, le.Uint32(fb[i:]), pat)
			}
		}
	}
}

func TestSoftwareFillPhase(t *testing.T) {
	t.Parallel()
	mem := make([]byte, 64)
	sw := NewSoftware(mem)
	// Extents of odd lengths: the pattern continues across them.
	xs := []gtt.Extent{{Off: 40, Len: 3}, {Off: 1, Len: 6}, {Off: 20, Len: 7}}
	if err := sw.Fill(xs, 0x44332211); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 16)
	gather(got, mem, xs)
	want := bytes.Repeat([]byte{0x11, 0x22, 0x33, 0x44}, 4)
	if !bytes.Equal(got, want) {
		t.Fatalf("got % x, want % x", got, want)
	}
}

// TestSoftwareCopyOverlap checks memmove semantics when source and
// destination share host bytes, split into extents differently.
func TestSoftwareCopyOverlap(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(3, 4))
	split := func(off, n uint64) []gtt.Extent {
		var xs []gtt.Extent
		for n > 0 {
			l := min(n, 1+rng.Uint64N(700))
			xs = append(xs, gtt.Extent{Off: off, Len: l})
			off, n = off+l, n-l
		}
		return xs
	}
	for range 200 {
		mem := randBytes(rng, 8192)
		want := bytes.Clone(mem)
		n := 1 + rng.Uint64N(4000)
		so, do := rng.Uint64N(8192-n), rng.Uint64N(8192-n)
		copy(want[do:do+n], want[so:so+n])
		if err := NewSoftware(mem).Copy(split(do, n), split(so, n)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(mem, want) {
			t.Fatalf("overlapping copy %d bytes %#x -> %#x differs from memmove", n, so, do)
		}
	}
}

func TestSoftwareBounds(t *testing.T) {
	t.Parallel()
	sw := NewSoftware(make([]byte, 4096))
	bad := []gtt.Extent{{Off: 4000, Len: 200}}
	wrap := []gtt.Extent{{Off: math.MaxUint64 - 2, Len: 8}}
	ok := []gtt.Extent{{Off: 0, Len: 200}}
	for name, err := range map[string]error{
		"copy dst":     sw.Copy(bad, ok),
		"copy src":     sw.Copy(ok, bad),
		"copy sizes":   sw.Copy(ok, ok[:0]),
		"copy wrap":    sw.Copy(wrap, []gtt.Extent{{Len: 8}}),
		"fill":         sw.Fill(bad, 1),
		"write":        sw.Write(bad, make([]byte, 200)),
		"write sizes":  sw.Write(ok, make([]byte, 10)),
		"read":         sw.Read(make([]byte, 200), bad),
		"saxpy":        sw.Saxpy(50, 1, ok, bad),
		"saxpy sizes":  sw.Saxpy(49, 1, ok, ok),
		"saxpy huge":   sw.Saxpy(math.MaxUint64/2, 1, ok, ok),
		"stencil":      sw.Stencil(10, 5, bad, ok),
		"stencil huge": sw.Stencil(math.MaxUint32, math.MaxUint32, ok, ok),
		"render":       sw.Render(10, 5, 0, bad),
	} {
		if !errors.Is(err, cpuref.ErrBounds) {
			t.Errorf("%s: err %v, want ErrBounds", name, err)
		}
	}
}

// Plain reference kernels over little-endian byte buffers.

func refSaxpy(n int, a float32, x, y []byte) {
	for i := range n {
		xv := math.Float32frombits(le.Uint32(x[4*i:]))
		yv := math.Float32frombits(le.Uint32(y[4*i:]))
		p := float32(a * xv) // conversions forbid fusion, here as in the engine
		r := float32(p + yv)
		le.PutUint32(y[4*i:], refCanon(r))
	}
}

func refStencil(w, h int, in, out []byte) {
	at := func(x, y int) float32 { return math.Float32frombits(le.Uint32(in[4*(y*w+x):])) }
	for y := range h {
		for x := range w {
			v := at(x, y)
			if x > 0 && y > 0 && x < w-1 && y < h-1 {
				var s float32 = v
				s += at(x, y-1)
				s += at(x, y+1)
				s += at(x-1, y)
				s += at(x+1, y)
				v = s * float32(0.2)
				le.PutUint32(out[4*(y*w+x):], refCanon(v))
				continue
			}
			le.PutUint32(out[4*(y*w+x):], math.Float32bits(v))
		}
	}
}

// refCanon returns the bits of v, NaNs canonical.
func refCanon(v float32) uint32 {
	if math.IsNaN(float64(v)) {
		return 0x7fffffff
	}
	return math.Float32bits(v)
}

func refRender(w, h int, frame uint64, fb []byte) {
	t := uint8(frame)
	for y := range h {
		for x := range w {
			p := 4 * (y*w + x)
			fb[p] = uint8(x) + t
			fb[p+1] = uint8(y) + 2*t
			fb[p+2] = uint8(x^y) + 3*t
			fb[p+3] = 255
		}
	}
}

func TestSoftwareKernels(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(5, 6))
	for _, frag := range []bool{false, true} {
		for round := range 10 {
			mem := make([]byte, 2<<20)
			sw := NewSoftware(mem)
			pl := newPlacer(rng, uint64(len(mem)))
			place := contiguous(uint64(len(mem)))
			if frag {
				place = func(n uint64) []gtt.Extent { return pl.place(n, 4) }
			}

			n := 1 + rng.IntN(3000)
			a := float32(rng.NormFloat64())
			x, y := place(uint64(4*n)), place(uint64(4*n))
			randFloats(rng, mem) // everything, x and y included
			xb, yb := make([]byte, 4*n), make([]byte, 4*n)
			gather(xb, mem, x)
			gather(yb, mem, y)
			refSaxpy(n, a, xb, yb)
			if err := sw.Saxpy(uint64(n), a, x, y); err != nil {
				t.Fatal(err)
			}
			got := make([]byte, 4*n)
			gather(got, mem, y)
			if !bytes.Equal(got, yb) {
				t.Fatalf("frag %v round %d: saxpy differs", frag, round)
			}

			w, h := 1+rng.IntN(90), 1+rng.IntN(90)
			in, out := place(uint64(4*w*h)), place(uint64(4*w*h))
			ib, ob := make([]byte, 4*w*h), make([]byte, 4*w*h)
			gather(ib, mem, in)
			refStencil(w, h, ib, ob)
			if err := sw.Stencil(uint32(w), uint32(h), in, out); err != nil {
				t.Fatal(err)
			}
			got = make([]byte, 4*w*h)
			gather(got, mem, out)
			if !bytes.Equal(got, ob) {
				t.Fatalf("frag %v round %d: %dx%d stencil differs", frag, round, w, h)
			}

			frame := rng.Uint64()
			fb := place(uint64(4 * w * h))
			refRender(w, h, frame, ob)
			if err := sw.Render(uint32(w), uint32(h), frame, fb); err != nil {
				t.Fatal(err)
			}
			gather(got, mem, fb)
			if !bytes.Equal(got, ob) {
				t.Fatalf("frag %v round %d: %dx%d render differs", frag, round, w, h)
			}
		}
	}
}

// contiguous returns a placer of single extents in successive 256 KiB regions.
func contiguous(poolSize uint64) func(n uint64) []gtt.Extent {
	next := uint64(0)
	return func(n uint64) []gtt.Extent {
		off := next
		next += 256 << 10
		if next > poolSize {
			panic("contiguous: pool too small")
		}
		return []gtt.Extent{{Off: off, Len: n}}
	}
}

// TestSoftwareKernelAliasing runs kernels whose buffers share host memory:
// inputs are read in full before outputs are written.
func TestSoftwareKernelAliasing(t *testing.T) {
	t.Parallel()
	mem := make([]byte, 1<<16)
	rng := rand.New(rand.NewPCG(7, 8))
	randFloats(rng, mem)
	sw := NewSoftware(mem)
	// y's second half is x's first half.
	n := 512
	x := []gtt.Extent{{Off: 0, Len: uint64(4 * n)}}
	y := []gtt.Extent{{Off: 2048, Len: 1024}, {Off: 8192, Len: uint64(4*n) - 1024}}
	xb, yb := make([]byte, 4*n), make([]byte, 4*n)
	gather(xb, mem, x)
	gather(yb, mem, y)
	refSaxpy(n, 1.5, xb, yb)
	want := bytes.Clone(mem)
	scatter(want, y, yb)
	if err := sw.Saxpy(uint64(n), 1.5, x, y); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mem, want) {
		t.Fatal("aliased saxpy differs from gather-compute-scatter")
	}

	w, h := 16, 16
	in := []gtt.Extent{{Off: 20000, Len: uint64(4 * w * h)}}
	out := []gtt.Extent{{Off: 20000 + 512, Len: 256}, {Off: 40000, Len: uint64(4*w*h) - 256}}
	ib, ob := make([]byte, 4*w*h), make([]byte, 4*w*h)
	gather(ib, mem, in)
	refStencil(w, h, ib, ob)
	want = bytes.Clone(mem)
	scatter(want, out, ob)
	if err := sw.Stencil(uint32(w), uint32(h), in, out); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mem, want) {
		t.Fatal("aliased stencil differs from gather-compute-scatter")
	}
}
