package engine

import (
	"fmt"

	"github.com/gmig-dev/gmig/engine/cpuref"
	"github.com/gmig-dev/gmig/gtt"
)

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
	mem      []byte
	scratch  []float32
	addrBase uint64 // DeviceAddrBase: SoftwareDeviceAddrBase with local memory, else 0
}

// SoftwareDeviceAddrBase is the software back end's device address of
// device-local byte 0 (RegDeviceAddrBase, ABI 1.3): a fixed value, 2 MiB
// aligned, the same on every host, so that save/restore and migration keep
// it (docs/device-abi.md §1.4). 1<<44 lies above every address a guest's
// own 48-bit user space would use for host pointers it stores beside it.
const SoftwareDeviceAddrBase = 1 << 44

// NewSoftware returns the software back end over mem, the whole host pool
// mapping; extents are byte offsets into mem.
func NewSoftware(mem []byte) Backend { return &software{mem: mem} }

// NewSoftwareLocal is NewSoftware for a vGPU with device-local memory
// (its extents lie in mem too): DeviceAddrBase reports
// SoftwareDeviceAddrBase.
func NewSoftwareLocal(mem []byte) Backend {
	return &software{mem: mem, addrBase: SoftwareDeviceAddrBase}
}

func (s *software) DeviceAddrBase() uint64 { return s.addrBase }

func (s *software) Name() string { return "software" }
func (s *software) Sync() error  { return nil }

// check bounds-checks every list and returns their total lengths.
func (s *software) check(lists ...[]gtt.Extent) ([]uint64, error) {
	tot := make([]uint64, len(lists))
	for i, l := range lists {
		n, err := cpuref.CheckExtents(uint64(len(s.mem)), l)
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
		return fmt.Errorf("%w: copy of %d bytes into %d", cpuref.ErrBounds, tot[1], tot[0])
	}
	if cpuref.Overlaps(dst, src) {
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
		cpuref.FillBytes(s.mem[x.Off:x.Off+x.Len], pat, int(phase%4))
		phase += x.Len
	}
	return nil
}

func (s *software) Write(dst []gtt.Extent, src []byte) error {
	tot, err := s.check(dst)
	if err != nil {
		return err
	}
	if tot[0] != uint64(len(src)) {
		return fmt.Errorf("%w: write of %d bytes into %d", cpuref.ErrBounds, len(src), tot[0])
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
		return fmt.Errorf("%w: read of %d bytes into %d", cpuref.ErrBounds, tot[0], len(dst))
	}
	gather(dst, s.mem, src)
	return nil
}

func (s *software) Saxpy(n uint64, a float32, x, y []gtt.Extent) error {
	nb, err := cpuref.WordBytes(n)
	if err != nil {
		return err
	}
	tot, err := s.check(x, y)
	if err != nil {
		return err
	}
	if tot[0] != nb || tot[1] != nb {
		return fmt.Errorf("%w: saxpy of %d bytes over buffers of %d and %d", cpuref.ErrBounds, nb, tot[0], tot[1])
	}
	if n == 0 {
		return nil
	}
	alias := cpuref.Aliased(x, y)
	if !alias {
		if xv, yv := cpuref.F32View(region(s.mem, x)), cpuref.F32View(region(s.mem, y)); xv != nil && yv != nil {
			cpuref.Saxpy(a, xv, yv)
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
		xs, ys := cpuref.F32Bytes(xb[:k]), cpuref.F32Bytes(yb[:k])
		xi.read(s.mem, 4*i, xs)
		yi.read(s.mem, 4*i, ys)
		cpuref.SwapWords(xs)
		cpuref.SwapWords(ys)
		cpuref.Saxpy(a, xb[:k], yb[:k])
		cpuref.SwapWords(ys)
		yi.write(s.mem, 4*i, ys)
	}
	return nil
}

func (s *software) Stencil(w, h uint32, in, out []gtt.Extent) error {
	nb, err := cpuref.GridBytes(w, h)
	if err != nil {
		return err
	}
	tot, err := s.check(in, out)
	if err != nil {
		return err
	}
	if tot[0] != nb || tot[1] != nb {
		return fmt.Errorf("%w: %dx%d stencil over buffers of %d and %d", cpuref.ErrBounds, w, h, tot[0], tot[1])
	}
	if nb == 0 {
		return nil
	}
	W, H := int(w), int(h)
	alias := cpuref.Aliased(in, out)
	if !alias {
		if iv, ov := cpuref.F32View(region(s.mem, in)), cpuref.F32View(region(s.mem, out)); iv != nil && ov != nil {
			cpuref.StencilRows(W, H, 0, H, iv, 0, ov)
			return nil
		}
	}
	// rows fills dst with input rows from lo on.
	var rows func(dst []float32, lo int)
	if alias {
		all := make([]float32, W*H) // the whole input, before any output is written
		gather(cpuref.F32Bytes(all), s.mem, in)
		cpuref.SwapWords(cpuref.F32Bytes(all))
		rows = func(dst []float32, lo int) { copy(dst, all[lo*W:]) }
	} else {
		ix := newIndex(in)
		rows = func(dst []float32, lo int) {
			ix.read(s.mem, uint64(lo*W)*4, cpuref.F32Bytes(dst))
			cpuref.SwapWords(cpuref.F32Bytes(dst))
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
		cpuref.StencilRows(W, H, r0, r1, ib, lo, ob)
		cpuref.SwapWords(cpuref.F32Bytes(ob))
		oi.write(s.mem, uint64(r0*W)*4, cpuref.F32Bytes(ob))
	}
	return nil
}

func (s *software) Render(w, h uint32, frame uint64, fb []gtt.Extent) error {
	nb, err := cpuref.GridBytes(w, h)
	if err != nil {
		return err
	}
	tot, err := s.check(fb)
	if err != nil {
		return err
	}
	if tot[0] != nb {
		return fmt.Errorf("%w: %dx%d framebuffer over %d bytes", cpuref.ErrBounds, w, h, tot[0])
	}
	if nb == 0 {
		return nil
	}
	t := uint32(frame)
	if v := cpuref.U32View(region(s.mem, fb)); v != nil {
		cpuref.RenderPixels(w, 0, t, v)
		return nil
	}
	fi := newIndex(fb)
	buf := s.floats(int(min(uint64(chunkElems), nb/4)))
	for p := uint64(0); p < nb/4; p += uint64(len(buf)) {
		k := min(uint64(len(buf)), nb/4-p)
		px := cpuref.F32AsU32(buf[:k])
		cpuref.RenderPixels(w, p, t, px)
		b := cpuref.F32Bytes(buf[:k])
		cpuref.SwapWords(b)
		fi.write(s.mem, 4*p, b)
	}
	return nil
}
