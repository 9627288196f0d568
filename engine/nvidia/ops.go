package nvidia

import (
	"fmt"
	"math"

	"github.com/gmig-dev/gmig/engine/cpuref"
	"github.com/gmig-dev/gmig/gtt"
)

// The Backend operations of the NVIDIA back end. Each checks its extents
// as the software back end does (same errors), brings its inputs to the
// device, runs, and leaves its outputs pending in the mirror (markWritten).
// Every operation waits for its kernels before returning, so that the
// engine's next host-side access sees a quiet device.

// align16 rounds n up to a multiple of 16 (scratch buffers start there).
func align16(n uint64) uint64 { return (n + 15) &^ 15 }

func (b *NVIDIA) Copy(dst, src []gtt.Extent) error {
	b.stats.Commands.Add(1)
	ds, dn, err := b.spans(dst)
	if err != nil {
		return err
	}
	ss, sn, err := b.spans(src)
	if err != nil {
		return err
	}
	if dn != sn {
		return fmt.Errorf("%w: copy of %d bytes into %d", cpuref.ErrBounds, sn, dn)
	}
	if dn == 0 {
		return nil
	}
	selfAlias := cpuref.Aliased(dst)
	if cpuref.Overlaps(dst, src) || selfAlias {
		// memmove: every source byte is read before any is written, and
		// aliased destinations are written in graphics-address order.
		if err := b.ensureScratch(sn); err != nil {
			return err
		}
		if err := b.runPieces(b.g.fn.copyPieces, b.gatherPieces(nil, ss, uint64(b.scratch)), false); err != nil {
			return err
		}
		if err := b.runPieces(b.g.fn.copyPieces, b.scatterPieces(nil, uint64(b.scratch), ds), selfAlias); err != nil {
			return err
		}
		return b.markWritten(ds)
	}
	var ps []nvPiece
	zip(ss, ds, func(so, do, n uint64) { ps = b.sourcePieces(ps, so, n, b.devAddr(do)) })
	if err := b.runPieces(b.g.fn.copyPieces, ps, false); err != nil {
		return err
	}
	return b.markWritten(ds)
}

func (b *NVIDIA) Fill(dst []gtt.Extent, pattern uint32) error {
	b.stats.Commands.Add(1)
	ds, _, err := b.spans(dst)
	if err != nil {
		return err
	}
	var ps []nvPiece
	var k uint64 // bytes of the run before this piece: its phase is k mod 4
	for _, s := range ds {
		for o := uint64(0); o < s.n; o += maxPiece {
			n := min(maxPiece, s.n-o)
			ps = append(ps, nvPiece{src: (k + o) % 4, dst: b.devAddr(s.off) + o, len: n})
		}
		k += s.n
	}
	if err := b.runPieces(b.g.fn.fillPieces, ps, cpuref.Aliased(dst), uint64(pattern)); err != nil {
		return err
	}
	return b.markWritten(ds)
}

func (b *NVIDIA) Write(dst []gtt.Extent, src []byte) error {
	b.stats.Commands.Add(1)
	ds, n, err := b.spans(dst)
	if err != nil {
		return err
	}
	if n != uint64(len(src)) {
		return fmt.Errorf("%w: write of %d bytes into %d", cpuref.ErrBounds, len(src), n)
	}
	// Bytes of these pages still pending on the device go back first; the
	// host write then supersedes whatever it covers.
	if err := b.writeBackSpans(ds); err != nil {
		return err
	}
	for _, s := range ds {
		if b.isLocal(s.off) {
			if err := b.writeLocal(s, src[:s.n]); err != nil {
				return err
			}
			src = src[s.n:]
			continue
		}
		c := copy(b.cfg.Window[s.off:s.off+s.n], src)
		src = src[c:]
	}
	return nil
}

func (b *NVIDIA) Read(dst []byte, src []gtt.Extent) error {
	b.stats.Commands.Add(1)
	ss, n, err := b.spans(src)
	if err != nil {
		return err
	}
	if n != uint64(len(dst)) {
		return fmt.Errorf("%w: read of %d bytes into %d", cpuref.ErrBounds, n, len(dst))
	}
	if err := b.writeBackSpans(ss); err != nil {
		return err
	}
	for _, s := range ss {
		if b.isLocal(s.off) {
			if err := b.readLocal(dst[:s.n], s); err != nil {
				return err
			}
			dst = dst[s.n:]
			continue
		}
		c := copy(dst, b.cfg.Window[s.off:s.off+s.n])
		dst = dst[c:]
	}
	return nil
}

// Sync writes every pending byte back to the window: after it the
// aperture shows every command so far (a FENCE retires after it), and
// LAUNCH_GRID kernels have finished (launch.go).
func (b *NVIDIA) Sync() error { return b.syncAll() }

// kernelIO gathers the inputs of a kernel into scratch (at the offsets
// given) and returns the output's spans; in and offs pair up.
func (b *NVIDIA) gatherInputs(need uint64, ins [][]span, offs []uint64) error {
	if err := b.ensureScratch(need); err != nil {
		return err
	}
	var ps []nvPiece
	for i, in := range ins {
		ps = b.gatherPieces(ps, in, uint64(b.scratch)+offs[i])
	}
	return b.runPieces(b.g.fn.copyPieces, ps, false)
}

// scatterOutput copies the kernel output at scratch offset off over out's
// mirror bytes and marks them written.
func (b *NVIDIA) scatterOutput(off uint64, out []span, xs []gtt.Extent) error {
	if err := b.runPieces(b.g.fn.copyPieces, b.scatterPieces(nil, uint64(b.scratch)+off, out), cpuref.Aliased(xs)); err != nil {
		return err
	}
	return b.markWritten(out)
}

func (b *NVIDIA) Saxpy(n uint64, a float32, x, y []gtt.Extent) error {
	b.stats.Commands.Add(1)
	nb, err := cpuref.WordBytes(n)
	if err != nil {
		return err
	}
	xs, xn, err := b.spans(x)
	if err != nil {
		return err
	}
	ys, yn, err := b.spans(y)
	if err != nil {
		return err
	}
	if xn != nb || yn != nb {
		return fmt.Errorf("%w: saxpy of %d bytes over buffers of %d and %d", cpuref.ErrBounds, nb, xn, yn)
	}
	if n == 0 {
		return nil
	}
	yoff := align16(nb)
	if err := b.gatherInputs(yoff+nb, [][]span{xs, ys}, []uint64{0, yoff}); err != nil {
		return err
	}
	s := uint64(b.scratch)
	if err := b.launch(b.g.fn.saxpy, n, n, uint64(math.Float32bits(a)), s, s+yoff); err != nil {
		return err
	}
	return b.scatterOutput(yoff, ys, y)
}

func (b *NVIDIA) Stencil(w, h uint32, in, out []gtt.Extent) error {
	b.stats.Commands.Add(1)
	nb, err := cpuref.GridBytes(w, h)
	if err != nil {
		return err
	}
	is, in_, err := b.spans(in)
	if err != nil {
		return err
	}
	os, on, err := b.spans(out)
	if err != nil {
		return err
	}
	if in_ != nb || on != nb {
		return fmt.Errorf("%w: %dx%d stencil over buffers of %d and %d", cpuref.ErrBounds, w, h, in_, on)
	}
	if nb == 0 {
		return nil
	}
	ooff := align16(nb)
	if err := b.gatherInputs(ooff+nb, [][]span{is}, []uint64{0}); err != nil {
		return err
	}
	s := uint64(b.scratch)
	if err := b.launch(b.g.fn.stencil, nb/4, uint64(w), uint64(h), s, s+ooff); err != nil {
		return err
	}
	return b.scatterOutput(ooff, os, out)
}

func (b *NVIDIA) Render(w, h uint32, frame uint64, fb []gtt.Extent) error {
	b.stats.Commands.Add(1)
	nb, err := cpuref.GridBytes(w, h)
	if err != nil {
		return err
	}
	fs, fn, err := b.spans(fb)
	if err != nil {
		return err
	}
	if fn != nb {
		return fmt.Errorf("%w: %dx%d framebuffer over %d bytes", cpuref.ErrBounds, w, h, fn)
	}
	if nb == 0 {
		return nil
	}
	if err := b.ensureScratch(nb); err != nil {
		return err
	}
	if err := b.launch(b.g.fn.render, nb/4, uint64(w), uint64(h), uint64(uint32(frame)), uint64(b.scratch)); err != nil {
		return err
	}
	return b.scatterOutput(0, fs, fb)
}
