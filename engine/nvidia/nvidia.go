package nvidia

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/engine/cpuref"
	"github.com/gmig-dev/gmig/gtt"
	"github.com/gmig-dev/gmig/internal/cuda"
)

// WriteBack says when the NVIDIA back end copies what commands wrote on the
// device back to the host window, the aperture the guest's CPU reads
// (docs/nvidia.md, "The aperture").
type WriteBack int

const (
	// WriteBackFence copies back when a FENCE retires (Backend.Sync), when
	// the engine quiesces, and before the engine itself reads or writes
	// those bytes on the host (ring fetch, DMA, the fence's own write).
	// Work between fences stays on the device. The default.
	WriteBackFence WriteBack = iota
	// WriteBackCommand copies back after every command: the aperture shows
	// a command's writes as soon as it retires, at the price of a PCIe
	// round trip of every command's output.
	WriteBackCommand
)

// NVIDIAConfig configures an NVIDIA back end for one vGPU.
type NVIDIAConfig struct {
	GPU *GPU
	// Window is the vGPU's graphics memory in host memory: the shared
	// mapping of what QEMU maps as the aperture. It must be page aligned
	// and stay mapped until Close; the back end page-locks it.
	Window []byte
	// WindowOff is the extent offset of Window[0]: the engine hands the back
	// end extents of the host pool, and the window is the partition at
	// this offset.
	WindowOff uint64
	// LocalSize is the vGPU's device-local memory in bytes (ABI 1.2,
	// docs/device-abi.md §1.3; 0 for none, else whole pages): extents in
	// [WindowOff+len(Window), +LocalSize), the partition's local range,
	// name it. It lives on the GPU alone (local.go); the host bytes of that
	// range are never touched.
	LocalSize uint64
	WriteBack WriteBack
	// Modules lets guests load their own PTX (docs/device-abi.md §6.8).
	// Guest code runs in gmigd's CUDA context: see docs/nvidia.md,
	// "Isolation", before turning it on.
	Modules bool
	// Landed, when set, is told each window range a write-back just
	// stored (offsets into Window), after the bytes are there. The engine
	// reports a command's writes when the command completes, but on this
	// back end its outputs reach the window later (at a fence, a drained
	// ring, a quiesce): a migration that read a page between the two has
	// the old bytes, and a write log of the guest's mapping never sees
	// gmigd's own store. Reporting the store again as it lands keeps the
	// dirty tracking exact (vgpu wires it to the same observer as the
	// engine's writes).
	Landed func(off, n uint64)
	// Bulk, when set, is host memory (page aligned, whole pages, mapped
	// until Close) that the back end page-locks as it does the window: a
	// LocalTracker's Snapshot and Read into it, and LoadLocalPacked from
	// it, then cross PCIe straight from and into it (DMA), with no pass
	// through the back end's own pinned staging and no CPU copy. A GPU
	// worker's bulk buffer.
	Bulk []byte
	Log  zerolog.Logger
}

// NVIDIAStats counts the back end's traffic, for measuring the cost of the
// aperture's coherence.
type NVIDIAStats struct {
	Commands       uint64 // back-end operations
	HostReadBytes  uint64 // window bytes device kernels read over PCIe
	WriteBackBytes uint64 // device bytes copied back to the window
	GapBytes       uint64 // window bytes uploaded to keep a page's pending range contiguous
	SyncBytes      uint64 // window bytes uploaded for guest modules (whole-memory sync)
	ModuleLaunches uint64
	HashedBytes    uint64 // device bytes hashed to find guest modules' writes
}

// NVIDIA is the back end that runs commands on an NVIDIA GPU through the
// CUDA driver API (docs/nvidia.md). Graphics memory lives twice: in the
// host window, which is the aperture and the truth at every command
// boundary for every byte not pending, and in a device mirror laid out in
// aperture order in a virtual-memory-API mapping, where commands write.
// Inputs are read from the window over PCIe (or from the mirror where a
// command's output is still pending); outputs stay in the mirror until
// written back (WriteBack). Device-local memory, if the vGPU has any,
// lives once, on the device (local.go).
//
// Like every Backend it is used by one goroutine at a time (the engine's),
// except DeviceAddrBase, and a LocalTracker, which runs beside it
// (localmig.go).
type NVIDIA struct {
	g    *GPU
	dev  gpuDevice
	cfg  NVIDIAConfig
	log  zerolog.Logger
	size uint64 // window bytes

	stream cuda.Stream
	host   cuda.DevPtr // device address of the registered window
	bulk   cuda.DevPtr // device address of the registered cfg.Bulk (0: none)
	mirror gpuMapping  // graphics memory on the device
	pend   *pending
	local  gpuMapping // device-local memory (nil without): local.go
	// localBase is local's device address, for DeviceAddrBase from any
	// goroutine (the register file's) while a restore may move it.
	localBase atomic.Uint64

	table    []nvPiece // pinned, device-mapped piece table
	tableRaw []byte
	tableDev cuda.DevPtr

	scratch     cuda.DevPtr
	loadStage   []byte // pinned host staging of LoadLocal (stageBytes), once used
	scratchSize uint64

	mods  *moduleSet // guest modules; nil without Config.Modules
	grids int        // LAUNCH_GRID kernels queued since the stream was last waited for (launch.go)

	stats nvStats // read by Stats from any goroutine
}

// nvPiece mirrors kernels.cu's struct piece (24 bytes).
type nvPiece struct{ src, dst, len uint64 }

// Sizes of the back end's pieces and buffers.
const (
	maxPiece    = 64 << 10 // bytes one block copies at a time
	tablePieces = 1 << 16  // pieces per launch (1.5 MiB pinned)
)

// NewNVIDIA returns an NVIDIA back end over cfg.Window: it page-locks and
// maps the window for the device, and creates the device mirror (at any
// device address; Place moves it).
func NewNVIDIA(cfg NVIDIAConfig) (*NVIDIA, error) {
	if cfg.GPU == nil {
		return nil, errors.New("nvidia: NVIDIA back end without a GPU")
	}
	n := uint64(len(cfg.Window))
	if n == 0 || n%pageBytes != 0 {
		return nil, fmt.Errorf("nvidia: NVIDIA back end over a window of %d bytes (want whole pages)", n)
	}
	if cfg.LocalSize%pageBytes != 0 {
		return nil, fmt.Errorf("nvidia: %d bytes of device-local memory (want whole pages)", cfg.LocalSize)
	}
	b := &NVIDIA{g: cfg.GPU, dev: cfg.GPU.ops, cfg: cfg, size: n, pend: newPending(int(n / pageBytes))}
	b.log = cfg.Log.With().Str("gpu", cfg.GPU.Info().PCIBusID).Logger()
	if err := b.open(); err != nil {
		b.Close()
		return nil, err
	}
	if cfg.Modules {
		b.mods = newModuleSet()
	}
	b.log.Debug().Uint64("bytes", n).Uint64("mirror", uint64(b.mirror.Addr())).Msg("nvidia: NVIDIA back end ready")
	return b, nil
}

func (b *NVIDIA) open() error {
	var err error
	if b.stream, err = b.dev.NewStream(); err != nil {
		return err
	}
	if b.host, err = b.dev.HostRegister(b.cfg.Window); err != nil {
		return fmt.Errorf("nvidia: page-locking the %d-byte window: %w", b.size, err)
	}
	if len(b.cfg.Bulk) > 0 {
		if b.bulk, err = b.dev.HostRegister(b.cfg.Bulk); err != nil {
			return fmt.Errorf("nvidia: page-locking the %d-byte bulk buffer: %w", len(b.cfg.Bulk), err)
		}
	}
	if b.mirror, err = b.dev.NewMapping(b.size, 0, 0); err != nil {
		return fmt.Errorf("nvidia: mapping %d bytes of device memory: %w", b.size, err)
	}
	if b.tableRaw, b.tableDev, err = b.dev.AllocHostMapped(tablePieces * 24); err != nil {
		return err
	}
	b.table = pieceTable(b.tableRaw)
	return b.openLocal()
}

// Close frees the device memory, unlocks the window and destroys the
// stream; the back end is unusable afterwards. Pending device writes are
// not copied back (Sync first).
func (b *NVIDIA) Close() error {
	var errs []error
	keep := func(err error) {
		if err != nil {
			errs = append(errs, err)
		}
	}
	keep(b.settleGrids())
	if b.mods != nil {
		for h := range b.mods.byHandle {
			keep(b.UnloadModule(h))
		}
		keep(b.mods.free(b.dev))
	}
	if b.scratch != 0 {
		keep(b.dev.Free(b.scratch))
		b.scratch, b.scratchSize = 0, 0
	}
	if b.loadStage != nil {
		keep(b.dev.FreeHost(b.loadStage))
		b.loadStage = nil
	}
	if b.tableRaw != nil {
		keep(b.dev.FreeHost(b.tableRaw))
		b.tableRaw, b.table = nil, nil
	}
	if b.mirror != nil {
		keep(b.mirror.Close())
		b.mirror = nil
	}
	if b.local != nil {
		keep(b.local.Close())
		b.local = nil
	}
	if b.host != 0 {
		keep(b.dev.HostUnregister(b.cfg.Window))
		b.host = 0
	}
	if b.bulk != 0 {
		keep(b.dev.HostUnregister(b.cfg.Bulk))
		b.bulk = 0
	}
	if b.stream != 0 {
		keep(b.dev.DestroyStream(b.stream))
		b.stream = 0
	}
	return errors.Join(errs...)
}

func (b *NVIDIA) Name() string { return "nvidia" }

// Stats returns the back end's traffic counters.
func (b *NVIDIA) Stats() NVIDIAStats {
	s := &b.stats
	return NVIDIAStats{
		Commands: s.Commands.Load(), HostReadBytes: s.HostReadBytes.Load(), WriteBackBytes: s.WriteBackBytes.Load(),
		GapBytes: s.GapBytes.Load(), SyncBytes: s.SyncBytes.Load(), ModuleLaunches: s.ModuleLaunches.Load(),
		HashedBytes: s.HashedBytes.Load(),
	}
}

// nvStats are the counters behind NVIDIAStats.
type nvStats struct {
	Commands, HostReadBytes, WriteBackBytes, GapBytes, SyncBytes, ModuleLaunches, HashedBytes atomic.Uint64
}

// GPU is the GPU the back end runs on.
func (b *NVIDIA) GPU() *GPU { return b.g }

// MirrorBase is the device address of graphics-memory byte 0 on the device.
func (b *NVIDIA) MirrorBase() uint64 { return uint64(b.mirror.Addr()) }

// spans converts extents to window-relative spans, checking bounds:
// offsets below the window's size are the aperture's, those from there to
// the end of device-local memory are local (isLocal), and no span crosses
// from one to the other.
func (b *NVIDIA) spans(xs []gtt.Extent) ([]span, uint64, error) {
	out := make([]span, 0, len(xs))
	var total uint64
	end := b.size + b.cfg.LocalSize
	for _, x := range xs {
		if x.Len == 0 {
			continue
		}
		if x.Off < b.cfg.WindowOff || x.Off-b.cfg.WindowOff > end || x.Len > end-(x.Off-b.cfg.WindowOff) {
			return nil, 0, fmt.Errorf("%w: [%#x, +%#x) outside the window and local memory [%#x, +%#x)", cpuref.ErrBounds, x.Off, x.Len, b.cfg.WindowOff, end)
		}
		off := x.Off - b.cfg.WindowOff
		if off < b.size && off+x.Len > b.size {
			out = append(out, span{off, b.size - off}, span{b.size, off + x.Len - b.size})
		} else {
			out = append(out, span{off, x.Len})
		}
		total += x.Len
	}
	return out, total, nil
}

// appendPiece adds a copy of n bytes from src to dst, merging it into the
// last piece when both ends continue it, and splitting it at maxPiece.
func appendPiece(ps []nvPiece, src, dst, n uint64) []nvPiece {
	for n > 0 {
		if k := len(ps); k > 0 {
			l := &ps[k-1]
			if l.src+l.len == src && l.dst+l.len == dst && l.len < maxPiece {
				m := min(n, maxPiece-l.len)
				l.len += m
				src, dst, n = src+m, dst+m, n-m
				continue
			}
		}
		m := min(n, maxPiece)
		ps = append(ps, nvPiece{src, dst, m})
		src, dst, n = src+m, dst+m, n-m
	}
	return ps
}

// sourcePieces appends pieces that copy window bytes [off, off+n) to dst:
// from the mirror where a command's output is pending, else from the
// window itself over PCIe.
func (b *NVIDIA) sourcePieces(ps []nvPiece, off, n, dst uint64) []nvPiece {
	if b.isLocal(off) {
		return appendPiece(ps, b.devAddr(off), dst, n)
	}
	host, dev := uint64(b.host), uint64(b.mirror.Addr())
	forPages(span{off, n}, func(p, a, e uint64) {
		base := p * pageBytes
		at := func(x uint64) uint64 { return dst + base + x - off }
		lo, hi, ok := b.pend.get(p)
		if !ok || hi <= a || lo >= e {
			ps = appendPiece(ps, host+base+a, at(a), e-a)
			b.stats.HostReadBytes.Add(e - a)
			return
		}
		x0, x1 := max(a, lo), min(e, hi)
		if x0 > a {
			ps = appendPiece(ps, host+base+a, at(a), x0-a)
			b.stats.HostReadBytes.Add(x0 - a)
		}
		ps = appendPiece(ps, dev+base+x0, at(x0), x1-x0)
		if e > x1 {
			ps = appendPiece(ps, host+base+x1, at(x1), e-x1)
			b.stats.HostReadBytes.Add(e - x1)
		}
	})
	return ps
}

// zip walks two runs of the same length in step and calls fn for each
// stretch that is contiguous in both: offsets in a's and b's window (or
// buffer) coordinates and the stretch's length.
func zip(a, b []span, fn func(aoff, boff, n uint64)) {
	i, j := 0, 0
	var ai, bj uint64
	for i < len(a) && j < len(b) {
		n := min(a[i].n-ai, b[j].n-bj)
		fn(a[i].off+ai, b[j].off+bj, n)
		ai, bj = ai+n, bj+n
		if ai == a[i].n {
			i, ai = i+1, 0
		}
		if bj == b[j].n {
			j, bj = j+1, 0
		}
	}
}

// gather copies the bytes of src, in order, into device memory at dst
// (pending bytes from the mirror, the rest from the window).
func (b *NVIDIA) gatherPieces(ps []nvPiece, src []span, dst uint64) []nvPiece {
	var k uint64
	for _, s := range src {
		ps = b.sourcePieces(ps, s.off, s.n, dst+k)
		k += s.n
	}
	return ps
}

// scatterPieces copies device memory at src, in order, over the device
// bytes of dst (the mirror's, or local memory's).
func (b *NVIDIA) scatterPieces(ps []nvPiece, src uint64, dst []span) []nvPiece {
	var k uint64
	for _, s := range dst {
		ps = appendPiece(ps, src+k, b.devAddr(s.off), s.n)
		k += s.n
	}
	return ps
}

// runPieces runs kernel fn (copy or fill) over ps, in batches of the
// table's size, and waits for it. With inOrder the pieces are processed
// one after the other (one block), so that later ones win where they
// overlap earlier ones.
func (b *NVIDIA) runPieces(fn cuda.Function, ps []nvPiece, inOrder bool, extra ...uint64) error {
	if err := b.settleGrids(); err != nil {
		return err
	}
	for len(ps) > 0 {
		n := min(len(ps), len(b.table))
		copy(b.table, ps[:n])
		grid := uint32(min(n, pieceBlocks))
		if inOrder {
			grid = 1
		}
		args := append([]uint64{uint64(b.tableDev), uint64(n)}, extra...)
		if err := b.dev.Launch(fn, grid, blockThreads, b.stream, args...); err != nil {
			return err
		}
		if err := b.dev.Sync(b.stream); err != nil {
			return err
		}
		ps = ps[n:]
	}
	return nil
}

// launch runs one grid-stride kernel over items and waits for it.
func (b *NVIDIA) launch(fn cuda.Function, items uint64, args ...uint64) error {
	if err := b.settleGrids(); err != nil {
		return err
	}
	if err := b.dev.Launch(fn, b.g.gridFor(items), blockThreads, b.stream, args...); err != nil {
		return err
	}
	return b.dev.Sync(b.stream)
}

// ensureScratch makes the scratch buffer at least n bytes.
func (b *NVIDIA) ensureScratch(n uint64) error {
	if n <= b.scratchSize {
		return nil
	}
	if b.scratch != 0 {
		if err := b.dev.Free(b.scratch); err != nil {
			return err
		}
		b.scratch, b.scratchSize = 0, 0
	}
	size := max(n, 1<<20)
	p, err := b.dev.Alloc(size)
	if err != nil {
		return fmt.Errorf("nvidia: %d bytes of device scratch: %w", size, err)
	}
	b.scratch, b.scratchSize = p, size
	return nil
}

// markWritten records that the mirror now holds the newest bytes of
// spans. A page whose pending range would no longer be contiguous gets
// the gap uploaded from the window first, so that the range can grow
// over it: the gap's device bytes then equal the window's.
func (b *NVIDIA) markWritten(spans []span) error {
	type part struct{ p, a, e uint64 }
	var parts []part
	for _, s := range spans {
		if b.isLocal(s.off) {
			continue // local memory has no host copy to keep coherent
		}
		forPages(s, func(p, a, e uint64) { parts = append(parts, part{p, a, e}) })
	}
	slices.SortFunc(parts, func(x, y part) int {
		if x.p != y.p {
			return cmpU64(x.p, y.p)
		}
		return cmpU64(x.a, y.a)
	})
	var gaps []nvPiece
	host, dev := uint64(b.host), uint64(b.mirror.Addr())
	gap := func(p, x, y uint64) {
		if y > x {
			gaps = appendPiece(gaps, host+p*pageBytes+x, dev+p*pageBytes+x, y-x)
			b.stats.GapBytes.Add(y - x)
		}
	}
	for i := 0; i < len(parts); {
		p := parts[i].p
		// The intervals of page p, old pending range included, sorted.
		var iv [][2]uint64
		if lo, hi, ok := b.pend.get(p); ok {
			iv = append(iv, [2]uint64{lo, hi})
		}
		for ; i < len(parts) && parts[i].p == p; i++ {
			iv = append(iv, [2]uint64{parts[i].a, parts[i].e})
		}
		slices.SortFunc(iv, func(x, y [2]uint64) int { return cmpU64(x[0], y[0]) })
		lo, hi := iv[0][0], iv[0][1]
		for _, v := range iv[1:] {
			if v[0] > hi {
				gap(p, hi, v[0])
			}
			hi = max(hi, v[1])
		}
		b.pend.set(p, lo, hi)
	}
	if len(gaps) > 0 {
		if err := b.runPieces(b.g.fn.copyPieces, gaps, false); err != nil {
			return err
		}
	}
	if b.cfg.WriteBack == WriteBackCommand {
		return b.writeBackAll()
	}
	return nil
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// writeBackAll copies every pending byte back to the window.
func (b *NVIDIA) writeBackAll() error {
	if b.pend.empty() {
		return nil
	}
	list := slices.Clone(b.pend.list)
	slices.Sort(list)
	var ps []nvPiece
	host, dev := uint64(b.host), uint64(b.mirror.Addr())
	prev := int64(-1)
	for _, p32 := range list {
		p := uint64(p32)
		if int64(p) == prev {
			continue
		}
		prev = int64(p)
		if lo, hi, ok := b.pend.get(p); ok {
			ps = appendPiece(ps, dev+p*pageBytes+lo, host+p*pageBytes+lo, hi-lo)
			b.stats.WriteBackBytes.Add(hi - lo)
		}
	}
	if err := b.runPieces(b.g.fn.copyPieces, ps, false); err != nil {
		return err
	}
	b.landed(ps)
	b.pend.reset()
	return nil
}

// writeBackSpans copies back the pending ranges of the pages that spans
// touch and forgets them, so the window holds the newest bytes there.
func (b *NVIDIA) writeBackSpans(spans []span) error {
	if b.pend.empty() {
		return nil
	}
	var ps []nvPiece
	host, dev := uint64(b.host), uint64(b.mirror.Addr())
	for _, s := range spans {
		if b.isLocal(s.off) {
			continue
		}
		forPages(s, func(p, _, _ uint64) {
			if lo, hi, ok := b.pend.get(p); ok {
				ps = appendPiece(ps, dev+p*pageBytes+lo, host+p*pageBytes+lo, hi-lo)
				b.stats.WriteBackBytes.Add(hi - lo)
				b.pend.clearPage(p)
			}
		})
	}
	if len(ps) == 0 {
		return nil
	}
	if err := b.runPieces(b.g.fn.copyPieces, ps, false); err != nil {
		return err
	}
	b.landed(ps)
	return nil
}

// landed reports write-back pieces (device to window) to Landed.
func (b *NVIDIA) landed(ps []nvPiece) {
	if b.cfg.Landed == nil {
		return
	}
	host := uint64(b.host)
	for _, p := range ps {
		b.cfg.Landed(p.dst-host, p.len)
	}
}
