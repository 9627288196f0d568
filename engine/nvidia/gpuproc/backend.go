package gpuproc

import (
	"errors"
	"fmt"
	"math"

	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/engine/cpuref"
	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/gtt"
	"github.com/gmig-dev/gmig/internal/cuda"
	"github.com/gmig-dev/gmig/internal/parcopy"
)

// The Client's nvidia.VGPUBackend methods: engine.Backend's, and what the
// vGPU, a migration and gmig-nvbench use besides.

func (c *Client) Name() string { return "nvidia" }

func (c *Client) do(op Op, m *Msg) error {
	_, err := c.call(c.eng, op, m)
	return err
}

// writes notes that an operation writing dst may leave aperture bytes
// pending on the device.
func (c *Client) writes(dst []gtt.Extent) {
	end := c.cfg.WindowOff + uint64(len(c.cfg.Window))
	for _, x := range dst {
		if x.Len > 0 && x.Off < end {
			c.pending.Store(true)
			return
		}
	}
}

func (c *Client) Copy(dst, src []gtt.Extent) error {
	c.writes(dst)
	return c.do(OpCopy, &Msg{Dst: dst, Src: src})
}

func (c *Client) Fill(dst []gtt.Extent, pattern uint32) error {
	c.writes(dst)
	return c.do(OpFill, &Msg{Dst: dst, A: pattern})
}

// Write stores src in the window itself when every extent is aperture and
// nothing is pending there (as the back end would: its Write copies into
// the window after writing back what is pending), else through the worker.
func (c *Client) Write(dst []gtt.Extent, src []byte) error {
	if !c.pending.Load() && c.lost.Load() == nil {
		if w, ok := c.windowSpans(dst, uint64(len(src))); ok {
			for _, b := range w {
				src = src[copy(b, src):]
			}
			c.local.Add(1)
			return nil
		}
	}
	if len(src) >= bulkMin {
		return c.writeBulk(dst, src)
	}
	return c.do(OpWrite, &Msg{Dst: dst, Data: src})
}

// writeBulk is Write through the bulk buffer, a chunk a call. Every
// extent is checked first, as the back end in process does, so that a
// Write refused for bounds stores nothing, whatever chunk the bad extent
// is in.
func (c *Client) writeBulk(dst []gtt.Extent, src []byte) error {
	if err := c.checkExtents(dst); err != nil {
		return err
	}
	n, ok := extentBytes(dst)
	if !ok || n != uint64(len(src)) {
		return fmt.Errorf("gpuproc: %w: write of %d bytes into %d", cpuref.ErrBounds, len(src), n)
	}
	return bulkExtents(dst, n, func(xs []gtt.Extent, from, to uint64) error {
		return c.bulkCall(c.eng, OpWriteBulk, &Msg{Dst: xs}, int(to-from), func(b []byte) { parcopy.Copy(b, src[from:to]) }, nil)
	})
}

// readBulk is Read through the bulk buffer, a chunk a call, its extents
// checked first as writeBulk's are.
func (c *Client) readBulk(dst []byte, src []gtt.Extent) error {
	if err := c.checkExtents(src); err != nil {
		return err
	}
	n, ok := extentBytes(src)
	if !ok || n != uint64(len(dst)) {
		return fmt.Errorf("gpuproc: %w: read of %d bytes into %d", cpuref.ErrBounds, n, len(dst))
	}
	return bulkExtents(src, n, func(xs []gtt.Extent, from, to uint64) error {
		return c.bulkCall(c.eng, OpReadBulk, &Msg{Src: xs}, int(to-from), nil, func(b []byte) { parcopy.Copy(dst[from:to], b) })
	})
}

// checkExtents refuses, as the back end in process does
// (nvidia.NVIDIA's spans), an extent outside the window and device-local
// memory: extents are pool offsets, the window's byte 0 at WindowOff and
// local memory right after it.
func (c *Client) checkExtents(xs []gtt.Extent) error {
	end := uint64(len(c.cfg.Window)) + c.cfg.LocalSize
	for _, x := range xs {
		if x.Len == 0 {
			continue
		}
		if x.Off < c.cfg.WindowOff || x.Off-c.cfg.WindowOff > end || x.Len > end-(x.Off-c.cfg.WindowOff) {
			return fmt.Errorf("gpuproc: %w: [%#x, +%#x) outside the window and local memory [%#x, +%#x)", cpuref.ErrBounds, x.Off, x.Len, c.cfg.WindowOff, end)
		}
	}
	return nil
}

// windowSpans returns the window bytes xs name, if every extent lies in
// the aperture and they hold n bytes in all.
func (c *Client) windowSpans(xs []gtt.Extent, n uint64) ([][]byte, bool) {
	w, base := c.cfg.Window, c.cfg.WindowOff
	out := make([][]byte, 0, len(xs))
	var total uint64
	for _, x := range xs {
		if x.Off < base || x.Off-base > uint64(len(w)) || x.Len > uint64(len(w))-(x.Off-base) {
			return nil, false
		}
		out = append(out, w[x.Off-base:x.Off-base+x.Len])
		total += x.Len
	}
	return out, total == n
}

// Read reads through the worker. Once the worker is gone, reads that lie
// in the aperture are served from gmigd's own mapping of it (what the
// device had written back is there; the guest's CPU sees the same bytes):
// the engine still fetches the ring, so each later command is decoded and
// fails on its own stream with the lost context's 719, instead of the
// ring fetch failing as a page fault no stream reports.
//
// While nothing is pending (Client.pending) reads of the aperture are
// served from the window with no round trip, as Write's.
func (c *Client) Read(dst []byte, src []gtt.Extent) error {
	if !c.pending.Load() && c.lost.Load() == nil && c.readWindow(dst, src) {
		c.local.Add(1)
		return nil
	}
	if len(dst) >= bulkMin {
		err := c.readBulk(dst, src)
		if errors.Is(err, ErrWorkerLost) && c.readWindow(dst, src) {
			return nil
		}
		return err
	}
	rep, err := c.call(c.eng, OpRead, &Msg{Src: src, X: uint64(len(dst))})
	if errors.Is(err, ErrWorkerLost) && c.readWindow(dst, src) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(rep.Data) != len(dst) {
		return c.broken(OpRead, fmt.Errorf("%w: %d bytes answering a read of %d", ErrMalformed, len(rep.Data), len(dst)))
	}
	copy(dst, rep.Data)
	return nil
}

// readWindow copies src from gmigd's mapping of the aperture, if every
// extent lies in it and the lengths match; it reports whether it did.
func (c *Client) readWindow(dst []byte, src []gtt.Extent) bool {
	w, ok := c.windowSpans(src, uint64(len(dst)))
	if !ok {
		return false
	}
	for _, b := range w {
		dst = dst[copy(dst, b):]
	}
	return true
}

func (c *Client) Saxpy(n uint64, a float32, x, y []gtt.Extent) error {
	c.writes(y)
	return c.do(OpSaxpy, &Msg{X: n, A: math.Float32bits(a), Src: x, Dst: y})
}

func (c *Client) Stencil(w, h uint32, in, out []gtt.Extent) error {
	c.writes(out)
	return c.do(OpStencil, &Msg{A: w, B: h, Src: in, Dst: out})
}

func (c *Client) Render(w, h uint32, frame uint64, fb []gtt.Extent) error {
	c.writes(fb)
	return c.do(OpRender, &Msg{A: w, B: h, X: frame, Dst: fb})
}

// Sync writes every pending byte back (in the worker): after a success the
// window is the truth again.
func (c *Client) Sync() error {
	err := c.do(OpSync, &Msg{})
	if err == nil {
		c.pending.Store(false)
	}
	return err
}

func (c *Client) LoadModule(handle uint32, m engine.Module) error {
	err := c.do(OpLoadModule, &Msg{C: handle, B: m.Handle, A: m.Args, Str: m.Entry, Data: m.PTX})
	if err == nil {
		c.handles[handle] = true
	}
	return err
}

func (c *Client) UnloadModule(handle uint32) error {
	delete(c.handles, handle) // the back end forgets it, whatever else fails
	return c.do(OpUnloadModule, &Msg{C: handle})
}

func (c *Client) LaunchModule(handle uint32, args []uint64) ([]gtt.Extent, error) {
	c.pending.Store(true) // a guest module writes the mirror anywhere
	rep, err := c.call(c.eng, OpLaunchModule, &Msg{C: handle, Words: args})
	return rep.Dst, err
}

func (c *Client) LaunchModuleParams(handle uint32, threads uint64, params []byte) ([]gtt.Extent, error) {
	c.pending.Store(true)
	rep, err := c.call(c.eng, OpLaunchModuleParams, &Msg{C: handle, X: threads, Data: params})
	return rep.Dst, err
}

// LaunchGrid posts the launch: no round trip. What the in-process back
// end refuses at once (modules off, an unknown handle) is refused here,
// alike; anything else the worker finds answers the next call, wrapping
// engine.ErrLaunchFailed.
func (c *Client) LaunchGrid(handle uint32, g engine.Grid, params []byte) error {
	if !c.cfg.Modules {
		return fmt.Errorf("%w: guest modules are off for this vGPU", engine.ErrNoModules)
	}
	if !c.handles[handle] {
		return fmt.Errorf("%w: no module %d in the back end", engine.ErrBadKernel, handle)
	}
	return c.post(OpLaunchGrid, &Msg{C: handle, Grid: g, Data: params})
}

func (c *Client) Place(va uint64) (uint64, error) {
	rep, err := c.call(c.eng, OpPlace, &Msg{X: va})
	if err == nil {
		c.mirror.Store(rep.X)
	}
	return rep.X, err
}

// DeviceAddrBase implements engine.Backend from any goroutine: the base
// the worker last reported (it moves only by PlaceLocal).
func (c *Client) DeviceAddrBase() uint64 { return c.base.Load() }

func (c *Client) Info() cuda.DeviceInfo { return c.info }

func (c *Client) MirrorBase() uint64 { return c.mirror.Load() }

func (c *Client) LocalSize() uint64 { return c.cfg.LocalSize }

// PlaceLocal moves device-local memory to addr in the worker; where it is
// there already (the base the worker last reported: it moves only by this
// call) there is nothing to ask. A migration's destination restores the
// source's address in the downtime after its pre-copy placed it there:
// the round trip to a worker on a busy host took 1.9 ms of the H200's
// 16 GiB restore.
func (c *Client) PlaceLocal(addr uint64) error {
	if c.cfg.LocalSize > 0 && addr != 0 && addr == c.base.Load() && c.lost.Load() == nil {
		return nil
	}
	rep, err := c.call(c.eng, OpPlaceLocal, &Msg{X: addr})
	if rep.X != 0 || err == nil {
		c.base.Store(rep.X)
	}
	return err
}

// LoadLocal sends the listed pages of mem alone (the worker has no copy of
// local memory's host image: the pool's local range is gmigd's anonymous
// memory): through the bulk buffer, a chunk a call, unless they are few.
func (c *Client) LoadLocal(pages []int, mem []byte) error {
	limit := int(c.cfg.LocalSize / pageSize)
	for _, p := range pages {
		if p < 0 || p >= limit || (p+1)*pageSize > len(mem) {
			return fmt.Errorf("gpuproc: loading local page %d (of %d) from %d bytes", p, limit, len(mem))
		}
	}
	if len(pages)*pageSize >= bulkMin {
		per := bulkChunk / pageSize
		for done := 0; done < len(pages); {
			chunk := pages[done : done+min(per, len(pages)-done)]
			fill := func(b []byte) { // the gather, on several cores: a stop phase's pages wait on it
				parcopy.Pages(len(chunk), pageSize, func(i int) ([]byte, []byte) {
					p := chunk[i]
					return b[i*pageSize : (i+1)*pageSize], mem[p*pageSize : (p+1)*pageSize]
				})
			}
			if err := c.bulkCall(c.eng, OpLoadLocalBulk, &Msg{Words: pageWords(chunk)}, len(chunk)*pageSize, fill, nil); err != nil {
				return err
			}
			done += len(chunk)
		}
		return nil
	}
	data := make([]byte, 0, len(pages)*pageSize)
	for _, p := range pages {
		data = append(data, mem[p*pageSize:(p+1)*pageSize]...)
	}
	return c.do(OpLoadLocal, &Msg{Words: pageWords(pages), Data: data})
}

// pageWords is a page list as the wire has it.
func pageWords(pages []int) []uint64 {
	words := make([]uint64, len(pages))
	for i, p := range pages {
		words[i] = uint64(p)
	}
	return words
}

// PageHasher hashes the window from gmigd's own CUDA context: it reads
// the aperture (host memory) with gmig's kernels only, no guest code.
func (c *Client) PageHasher() (*nvidia.GPUHasher, error) {
	g, err := nvidia.OpenGPU(c.cfg.GPU)
	if err != nil {
		return nil, err
	}
	return g.NewHostHasher(c.cfg.Window)
}

func (c *Client) Stats() nvidia.NVIDIAStats {
	rep, err := c.call(c.side, OpStats, &Msg{})
	if err != nil || len(rep.Words) < 7 {
		return nvidia.NVIDIAStats{}
	}
	w := rep.Words
	return nvidia.NVIDIAStats{Commands: w[0] + c.local.Load(), HostReadBytes: w[1], WriteBackBytes: w[2], GapBytes: w[3],
		SyncBytes: w[4], ModuleLaunches: w[5], HashedBytes: w[6]}
}

func (c *Client) ModelWrite(addr uint64, b []byte) error {
	_, err := c.call(c.side, OpModelWrite, &Msg{X: addr, Data: b})
	return err
}
