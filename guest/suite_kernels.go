package guest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/gmig-dev/gmig/abi"
)

// Kernel handles the suite uses; it unloads them before it returns.
const (
	suiteSaxpy   = 0x5117e001
	suiteStencil = 0x5117e002
	suiteRender  = 0x5117e003
	suiteSpare   = 0x5117e004
)

// randomFloats stores n finite binary32 values in [-4, 4) at off by CPU
// stores, mirrored in the model.
func (s *suite) randomFloats(off uint64, n int) error {
	b := s.ref[off : off+4*uint64(n)]
	for i := range n {
		v := float32(s.rng.Float64()*8 - 4)
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return s.d.WriteGA(s.base+off, b)
}

func checkSaxpy(s *suite) error {
	const n = 3000 // 12000 bytes: x and y each cross pages
	x, y := uint64(scrKernel+12), uint64(scrKernel+16<<10+2044)
	if err := errors.Join(s.randomFloats(x, n), s.randomFloats(y, n)); err != nil {
		return err
	}
	if err := s.d.LoadKernel(suiteSaxpy, abi.KernelSaxpy); err != nil {
		return err
	}
	for _, c := range []struct {
		n uint64
		a float32
	}{{n, 1.25}, {n - 1, -0.3}, {0, 2}, {1, 1e-3}} {
		if err := s.d.Saxpy(suiteSaxpy, c.n, c.a, s.base+x, s.base+y); err != nil {
			return err
		}
		RefSaxpy(s.ref, c.n, c.a, x, y)
	}
	// Non-finite inputs: computed NaNs are stored canonical (§7).
	nx, ny := uint64(scrKernel+40<<10), uint64(scrKernel+40<<10+64)
	f32Store(s.ref, nx, math.Float32frombits(0x7fc01234), float32(math.Inf(1)), 1, float32(math.NaN()))
	f32Store(s.ref, ny, 1, float32(math.Inf(-1)), float32(math.Inf(1)), 2)
	if err := s.d.WriteGA(s.base+nx, s.ref[nx:nx+16]); err != nil {
		return err
	}
	if err := s.d.WriteGA(s.base+ny, s.ref[ny:ny+16]); err != nil {
		return err
	}
	if err := s.d.Saxpy(suiteSaxpy, 4, 1, s.base+nx, s.base+ny); err != nil {
		return err
	}
	RefSaxpy(s.ref, 4, 1, nx, ny)
	if err := s.sync(); err != nil {
		return err
	}
	return s.expect(scrKernel, 64<<10)
}

func f32Store(mem []byte, off uint64, vs ...float32) {
	for i, v := range vs {
		binary.LittleEndian.PutUint32(mem[off+4*uint64(i):], math.Float32bits(v))
	}
}

func checkStencil(s *suite) error {
	const w, h = 67, 45 // 12060 bytes per grid
	in, out := uint64(scrKernel+100), uint64(scrKernel+32<<10+4)
	if err := s.randomFloats(in, w*h); err != nil {
		return err
	}
	if err := s.d.LoadKernel(suiteStencil, abi.KernelStencil); err != nil {
		return err
	}
	for i := range 5 {
		src, dst := in, out
		if i%2 == 1 {
			src, dst = out, in
		}
		if err := s.d.Stencil(suiteStencil, w, h, s.base+src, s.base+dst); err != nil {
			return err
		}
		RefStencil(s.ref, w, h, src, dst)
	}
	// Degenerate shapes: all border.
	if err := s.d.Stencil(suiteStencil, 1, 7, s.base+in, s.base+out); err != nil {
		return err
	}
	RefStencil(s.ref, 1, 7, in, out)
	if err := s.sync(); err != nil {
		return err
	}
	return s.expect(scrKernel, 64<<10)
}

func checkRender(s *suite) error {
	const w, h = 100, 50 // 20000 bytes
	fb := uint64(scrKernel + 8)
	if err := s.d.LoadKernel(suiteRender, abi.KernelRender); err != nil {
		return err
	}
	for _, frame := range []uint64{0, 7, 1<<32 + 300} {
		if err := s.d.Render(suiteRender, w, h, s.base+fb, frame); err != nil {
			return err
		}
		RefRender(s.ref, w, h, fb, frame)
		if err := s.sync(); err != nil {
			return err
		}
		if err := s.expect(scrKernel, 64<<10); err != nil {
			return fmt.Errorf("frame %d: %w", frame, err)
		}
	}
	return nil
}

// checkKernelErrors provokes each kind of ERR_STATUS.KERNEL one command at
// a time, checking ERR_OPCODE and ERR_RING_OFFSET, then unloads the
// suite's kernels and checks that a launch of an unloaded one fails.
func checkKernelErrors(s *suite) error {
	d := s.d
	x := s.base + scrKernel
	cases := []struct {
		name string
		cmd  []byte
		op   uint32
	}{
		{"duplicate handle", AppendKernelLoad(nil, suiteSaxpy, abi.KernelSaxpy), abi.OpKernelLoad},
		{"handle 0", AppendKernelLoad(nil, 0, abi.KernelSaxpy), abi.OpKernelLoad},
		{"unknown kind", AppendKernelLoad(nil, suiteSpare, 99), abi.OpKernelLoad},
		{"unknown handle", AppendLaunch(nil, suiteSpare, SaxpyArgs(1, 1, x, x+64)...), abi.OpLaunch},
		{"wrong arity", AppendLaunch(nil, suiteSaxpy, 1, 0, x), abi.OpLaunch},
		{"overlapping saxpy", AppendLaunch(nil, suiteSaxpy, SaxpyArgs(64, 1, x, x+128)...), abi.OpLaunch},
		{"unload unknown", AppendKernelUnload(nil, suiteSpare), abi.OpKernelUnload},
		{"stencil zero side", AppendLaunch(nil, suiteStencil, StencilArgs(0, 4, x, x+4096)...), abi.OpLaunch},
		{"unaligned saxpy", AppendLaunch(nil, suiteSaxpy, SaxpyArgs(4, 1, x+2, x+4096)...), abi.OpLaunch},
	}
	for _, c := range cases {
		at := d.tail
		if err := d.Submit(c.cmd); err != nil {
			return err
		}
		de, err := s.expectDeviceError(abi.ErrKernel)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		if de.Opcode != c.op || de.RingOffset != at {
			return fmt.Errorf("%s: ERR_OPCODE %d at ring offset %#x, want %d at %#x", c.name, de.Opcode, de.RingOffset, c.op, at)
		}
	}
	for _, h := range []uint32{suiteSaxpy, suiteStencil, suiteRender} {
		if err := d.UnloadKernel(h); err != nil {
			return err
		}
	}
	if err := s.sync(); err != nil {
		return fmt.Errorf("unloading: %w", err)
	}
	if err := d.Render(suiteRender, 4, 4, x, 1); err != nil {
		return err
	}
	if _, err := s.expectDeviceError(abi.ErrKernel); err != nil {
		return fmt.Errorf("launch after unload: %w", err)
	}
	return s.expect(scrKernel, 64<<10)
}
