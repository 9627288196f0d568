package engine

import (
	"fmt"
	"math"

	"github.com/gmig-dev/gmig/gtt"
)

// MaxKernelBuffer is the largest buffer a kernel may touch, in bytes
// (a gmig limit; it also keeps every size computation far from overflow).
const MaxKernelBuffer = 1 << 30

// Chunking of the software back end's general (fragmented) paths.
const (
	chunkElems   = 64 << 10 // float32s or pixels staged per step
	maxKeptElems = 1 << 20  // scratch kept between calls, in 4-byte words
)

// software is the back end that runs everything in Go on the host pool's
// mapping. When host ranges of one call alias each other (a guest mapped
// two graphics pages onto one backing page), every input is read before any
// output is written and outputs are written in graphics-address order, so
// the result does not depend on chunking.
type software struct {
	mem     []byte
	scratch []float32
}

// NewSoftware returns the software back end over mem, the whole host pool
// mapping; extents are byte offsets into mem.
func NewSoftware(mem []byte) Backend { return &software{mem: mem} }

func (s *software) Name() string { return "software" }
func (s *software) Sync() error  { return nil }

// check bounds-checks every list and returns their total lengths.
func (s *software) check(lists ...[]gtt.Extent) ([]uint64, error) {
	tot := make([]uint64, len(lists))
	for i, l := range lists {
		n, err := checkExtents(uint64(len(s.mem)), l)
		if err != nil {
			return nil, err
		}
		tot[i] = n
	}
	return tot, nil
}

// floats returns n float32s of scratch, reused between calls when small.
func (s *software) floats(n int) []float32 {
	if n > maxKeptElems {
		return make([]float32, n)
	}
	if cap(s.scratch) < n {
		s.scratch = make([]float32, n, max(n, chunkElems*3))
	}
	return s.scratch[:n]
}

func (s *software) Copy(dst, src []gtt.Extent) error {
	tot, err := s.check(dst, src)
	if err != nil {
		return err
	}
	if tot[0] != tot[1] {
		return fmt.Errorf("%w: copy of %d bytes into %d", ErrBounds, tot[1], tot[0])
	}
	if overlaps(dst, src) {
		// memmove: every source byte is read before any is overwritten.
		tmp := make([]byte, tot[1])
		gather(tmp, s.mem, src)
		scatter(s.mem, dst, tmp)
		return nil
	}
	i, j := 0, 0
	var di, sj uint64
	for i < len(dst) && j < len(src) {
		d, x := dst[i], src[j]
		n := min(d.Len-di, x.Len-sj)
		copy(s.mem[d.Off+di:d.Off+di+n], s.mem[x.Off+sj:x.Off+sj+n])
		di, sj = di+n, sj+n
		if di == d.Len {
			i, di = i+1, 0
		}
		if sj == x.Len {
			j, sj = j+1, 0
		}
	}
	return nil
}

func (s *software) Fill(dst []gtt.Extent, pattern uint32) error {
	if _, err := s.check(dst); err != nil {
		return err
	}
	var pat [4]byte
	le.PutUint32(pat[:], pattern)
	var phase uint64
	for _, x := range dst {
		fillBytes(s.mem[x.Off:x.Off+x.Len], pat, int(phase%4))
		phase += x.Len
	}
	return nil
}

// fillBytes writes pat repeatedly over b, b[0] being pat[phase].
func fillBytes(b []byte, pat [4]byte, phase int) {
	seed := min(len(b), 64)
	for i := range seed {
		b[i] = pat[(phase+i)%4]
	}
	for done := seed; done < len(b); {
		done += copy(b[done:], b[:done]) // done stays a multiple of 4
	}
}

func (s *software) Write(dst []gtt.Extent, src []byte) error {
	tot, err := s.check(dst)
	if err != nil {
		return err
	}
	if tot[0] != uint64(len(src)) {
		return fmt.Errorf("%w: write of %d bytes into %d", ErrBounds, len(src), tot[0])
	}
	scatter(s.mem, dst, src)
	return nil
}

func (s *software) Read(dst []byte, src []gtt.Extent) error {
	tot, err := s.check(src)
	if err != nil {
		return err
	}
	if tot[0] != uint64(len(dst)) {
		return fmt.Errorf("%w: read of %d bytes into %d", ErrBounds, tot[0], len(dst))
	}
	gather(dst, s.mem, src)
	return nil
}

// wordBytes returns 4*n, or an error when it does not fit the 1 GiB kernel
// buffer limit (which also rules out overflow).
func wordBytes(n uint64) (uint64, error) {
	if n > MaxKernelBuffer/4 {
		return 0, fmt.Errorf("%w: %d elements exceed the %d-byte buffer limit", ErrBounds, n, MaxKernelBuffer)
	}
	return 4 * n, nil
}

func (s *software) Saxpy(n uint64, a float32, x, y []gtt.Extent) error {
	nb, err := wordBytes(n)
	if err != nil {
		return err
	}
	tot, err := s.check(x, y)
	if err != nil {
		return err
	}
	if tot[0] != nb || tot[1] != nb {
		return fmt.Errorf("%w: saxpy of %d bytes over buffers of %d and %d", ErrBounds, nb, tot[0], tot[1])
	}
	if n == 0 {
		return nil
	}
	alias := aliased(x, y)
	if !alias {
		if xv, yv := f32View(region(s.mem, x)), f32View(region(s.mem, y)); xv != nil && yv != nil {
			saxpy(a, xv, yv)
			return nil
		}
	}
	step := uint64(chunkElems)
	if alias {
		step = n // read all of x and y before writing y
	}
	buf := s.floats(int(2 * step))
	xb, yb := buf[:step], buf[step:]
	xi, yi := newIndex(x), newIndex(y)
	for i := uint64(0); i < n; i += step {
		k := min(step, n-i)
		xs, ys := f32Bytes(xb[:k]), f32Bytes(yb[:k])
		xi.read(s.mem, 4*i, xs)
		yi.read(s.mem, 4*i, ys)
		swapWords(xs)
		swapWords(ys)
		saxpy(a, xb[:k], yb[:k])
		swapWords(ys)
		yi.write(s.mem, 4*i, ys)
	}
	return nil
}

// saxpy is docs/device-abi.md §7.1: each operation rounded to binary32, no
// fused multiply-add (the explicit conversions forbid fusion).
func saxpy(a float32, x, y []float32) {
	y = y[:len(x)]
	for i, xv := range x {
		y[i] = canon(float32(float32(a*xv) + y[i]))
	}
}

// canonNaN is the only NaN the kernels compute. IEEE 754 leaves the payload
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

// gridBytes returns w*h*4 for a kernel grid or framebuffer, or an error when
// it exceeds the kernel buffer limit.
func gridBytes(w, h uint32) (uint64, error) {
	cells := uint64(w) * uint64(h) // cannot overflow: both < 2^32
	return wordBytes(cells)
}

func (s *software) Stencil(w, h uint32, in, out []gtt.Extent) error {
	nb, err := gridBytes(w, h)
	if err != nil {
		return err
	}
	tot, err := s.check(in, out)
	if err != nil {
		return err
	}
	if tot[0] != nb || tot[1] != nb {
		return fmt.Errorf("%w: %dx%d stencil over buffers of %d and %d", ErrBounds, w, h, tot[0], tot[1])
	}
	if nb == 0 {
		return nil
	}
	W, H := int(w), int(h)
	alias := aliased(in, out)
	if !alias {
		if iv, ov := f32View(region(s.mem, in)), f32View(region(s.mem, out)); iv != nil && ov != nil {
			stencilRows(W, H, 0, H, iv, 0, ov)
			return nil
		}
	}
	// rows fills dst with input rows from lo on.
	var rows func(dst []float32, lo int)
	if alias {
		all := make([]float32, W*H) // the whole input, before any output is written
		gather(f32Bytes(all), s.mem, in)
		swapWords(f32Bytes(all))
		rows = func(dst []float32, lo int) { copy(dst, all[lo*W:]) }
	} else {
		ix := newIndex(in)
		rows = func(dst []float32, lo int) {
			ix.read(s.mem, uint64(lo*W)*4, f32Bytes(dst))
			swapWords(f32Bytes(dst))
		}
	}
	oi := newIndex(out)
	step := min(H, max(1, chunkElems/W))
	buf := s.floats((2*step + 2) * W)
	inBuf, outBuf := buf[:(step+2)*W], buf[(step+2)*W:]
	for r0 := 0; r0 < H; r0 += step {
		r1 := min(H, r0+step)
		lo, hi := max(r0-1, 0), min(r1+1, H)
		ib, ob := inBuf[:(hi-lo)*W], outBuf[:(r1-r0)*W]
		rows(ib, lo)
		stencilRows(W, H, r0, r1, ib, lo, ob)
		swapWords(f32Bytes(ob))
		oi.write(s.mem, uint64(r0*W)*4, f32Bytes(ob))
	}
	return nil
}

// fifth is the 0.2f of docs/device-abi.md §7.2, rounded to binary32.
const fifth float32 = 0.2

// stencilRows computes output rows [r0, r1) of the w x h stencil (§7.2).
// in holds input rows from inLo on (at least rows r0-1..r1 that exist), out
// holds rows r0..r1-1.
func stencilRows(w, h, r0, r1 int, in []float32, inLo int, out []float32) {
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

func (s *software) Render(w, h uint32, frame uint64, fb []gtt.Extent) error {
	nb, err := gridBytes(w, h)
	if err != nil {
		return err
	}
	tot, err := s.check(fb)
	if err != nil {
		return err
	}
	if tot[0] != nb {
		return fmt.Errorf("%w: %dx%d framebuffer over %d bytes", ErrBounds, w, h, tot[0])
	}
	if nb == 0 {
		return nil
	}
	t := uint32(frame)
	if v := u32View(region(s.mem, fb)); v != nil {
		renderPixels(w, 0, t, v)
		return nil
	}
	fi := newIndex(fb)
	buf := s.floats(int(min(uint64(chunkElems), nb/4)))
	for p := uint64(0); p < nb/4; p += uint64(len(buf)) {
		k := min(uint64(len(buf)), nb/4-p)
		px := f32AsU32(buf[:k])
		renderPixels(w, p, t, px)
		b := f32Bytes(buf[:k])
		swapWords(b)
		fi.write(s.mem, 4*p, b)
	}
	return nil
}

// renderPixels writes pixels p0.. of a framebuffer w pixels wide for frame
// t (docs/device-abi.md §7.3) into px.
func renderPixels(w uint32, p0 uint64, t uint32, px []uint32) {
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
