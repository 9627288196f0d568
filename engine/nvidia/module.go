package nvidia

import (
	"errors"
	"fmt"
	"slices"

	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/gtt"
	"github.com/gmig-dev/gmig/internal/cuda"
)

// Guest modules on the NVIDIA back end (docs/device-abi.md §6.8,
// docs/nvidia.md "Guest modules"). A guest kernel addresses graphics
// memory through the device mirror: its first parameter is the mirror's
// base, aperture byte i at base + i. It may read and write anything there,
// so around each launch the back end makes the whole mirror current (every
// byte not pending is uploaded from the window) and afterwards finds what
// the kernel changed by hashing every page of the mirror on the GPU before
// and after (xxHash64, as the dirty tracker): the changed pages become
// pending writes and are reported as the command's writes.

// gpuModule is one loaded guest module.
type gpuModule struct {
	mod  cuda.Module
	fn   cuda.Function
	args uint32
}

// moduleSet holds a back end's guest modules and the buffers their
// launches use.
type moduleSet struct {
	byHandle map[uint32]*gpuModule
	before   cuda.DevPtr // per-page hashes before a launch
	after    cuda.DevPtr // and after
	list     *diffList   // the pages a launch changed
}

func newModuleSet() *moduleSet { return &moduleSet{byHandle: map[uint32]*gpuModule{}} }

func (s *moduleSet) free(dev gpuDevice) error {
	var first error
	for _, p := range []*cuda.DevPtr{&s.before, &s.after} {
		if *p != 0 {
			if err := dev.Free(*p); err != nil && first == nil {
				first = err
			}
			*p = 0
		}
	}
	if err := s.list.free(dev); err != nil && first == nil {
		first = err
	}
	s.list = nil
	return first
}

func (b *NVIDIA) LoadModule(handle uint32, m engine.Module) error {
	if b.mods == nil {
		return fmt.Errorf("%w: guest modules are off for this vGPU", engine.ErrNoModules)
	}
	if _, ok := b.mods.byHandle[handle]; ok {
		return fmt.Errorf("%w: module handle %d in use in the back end", engine.ErrBadKernel, handle)
	}
	mod, err := b.dev.LoadModule(m.PTX)
	if err != nil {
		return fmt.Errorf("%w: %w", engine.ErrBadKernel, err)
	}
	fn, err := b.dev.Function(mod, m.Entry)
	if err != nil {
		_ = b.dev.UnloadModule(mod)
		return fmt.Errorf("%w: %w", engine.ErrBadKernel, err)
	}
	b.mods.byHandle[handle] = &gpuModule{mod: mod, fn: fn, args: m.Args}
	return nil
}

func (b *NVIDIA) UnloadModule(handle uint32) error {
	if b.mods == nil {
		return fmt.Errorf("%w: guest modules are off for this vGPU", engine.ErrNoModules)
	}
	m, ok := b.mods.byHandle[handle]
	if !ok {
		return fmt.Errorf("%w: no module %d in the back end", engine.ErrBadKernel, handle)
	}
	delete(b.mods.byHandle, handle)
	// Its LAUNCH_GRID kernels may still be queued: they finish first.
	return errors.Join(b.settleGrids(), b.dev.UnloadModule(m.mod))
}

// maxModuleThreads bounds a guest launch (a 1-D grid of 2^31-1 blocks is
// the hardware's limit; this keeps the grid small enough to be sane).
const maxModuleThreads = 1 << 31

func (b *NVIDIA) LaunchModule(handle uint32, args []uint64) ([]gtt.Extent, error) {
	if b.mods == nil {
		return nil, fmt.Errorf("%w: guest modules are off for this vGPU", engine.ErrNoModules)
	}
	m, ok := b.mods.byHandle[handle]
	if !ok {
		return nil, fmt.Errorf("%w: no module %d in the back end", engine.ErrBadKernel, handle)
	}
	if uint32(len(args)) != m.args || len(args) == 0 {
		return nil, fmt.Errorf("%w: module %d takes %d arguments, got %d", engine.ErrBadKernel, handle, m.args, len(args))
	}
	threads := args[0]
	if threads == 0 {
		return nil, nil
	}
	if threads > maxModuleThreads {
		return nil, fmt.Errorf("%w: %d threads (at most %d)", engine.ErrBadKernel, threads, uint64(maxModuleThreads))
	}
	b.stats.Commands.Add(1)
	b.stats.ModuleLaunches.Add(1)
	if err := b.syncMirror(); err != nil {
		return nil, err
	}
	pages := b.size / pageBytes
	if err := b.moduleBuffers(pages); err != nil {
		return nil, err
	}
	base := uint64(b.mirror.Addr())
	if err := b.hashMirror(b.mods.before, pages); err != nil {
		return nil, err
	}
	params := append([]uint64{base}, args...)
	grid := uint32((threads + blockThreads - 1) / blockThreads)
	if err := b.dev.Launch(m.fn, grid, blockThreads, b.stream, params...); err != nil {
		return nil, fmt.Errorf("%w: launching module %d: %w", engine.ErrBadKernel, handle, err)
	}
	if err := b.dev.Sync(b.stream); err != nil {
		return nil, fmt.Errorf("%w: module %d: %w", engine.ErrBadKernel, handle, err)
	}
	if err := b.hashMirror(b.mods.after, pages); err != nil {
		return nil, err
	}
	changed, err := b.diffPages(pages)
	if err != nil {
		return nil, err
	}
	spans := make([]span, 0, len(changed))
	xs := make([]gtt.Extent, 0, len(changed))
	for _, p := range changed {
		off := uint64(p) * pageBytes
		if k := len(spans); k > 0 && spans[k-1].off+spans[k-1].n == off {
			spans[k-1].n += pageBytes
			xs[k-1].Len += pageBytes
			continue
		}
		spans = append(spans, span{off, pageBytes})
		xs = append(xs, gtt.Extent{Off: b.cfg.WindowOff + off, Len: pageBytes})
	}
	return xs, b.markWritten(spans)
}

// syncMirror uploads every byte of the window that is not pending, so the
// mirror holds all of graphics memory.
func (b *NVIDIA) syncMirror() error {
	var ps []nvPiece
	host, dev := uint64(b.host), uint64(b.mirror.Addr())
	run := func(from, to uint64) {
		if to > from {
			ps = appendPiece(ps, host+from, dev+from, to-from)
			b.stats.SyncBytes.Add(to - from)
		}
	}
	var at uint64
	for p := uint64(0); p < b.size/pageBytes; p++ {
		if lo, hi, ok := b.pend.get(p); ok {
			run(at, p*pageBytes+lo)
			at = p*pageBytes + hi
		}
	}
	run(at, b.size)
	return b.runPieces(b.g.fn.copyPieces, ps, false)
}

// moduleBuffers allocates the hash arrays and the change list once.
func (b *NVIDIA) moduleBuffers(pages uint64) error {
	s := b.mods
	var err error
	for _, p := range []*cuda.DevPtr{&s.before, &s.after} {
		if *p == 0 {
			if *p, err = b.dev.Alloc(8 * pages); err != nil {
				return err
			}
		}
	}
	if s.list == nil {
		s.list, err = newDiffList(b.dev, pages)
	}
	return err
}

// hashMirror writes the xxHash64 of every mirror page to out.
func (b *NVIDIA) hashMirror(out cuda.DevPtr, pages uint64) error {
	b.stats.HashedBytes.Add(pages * pageBytes)
	return b.launchHash(uint64(b.mirror.Addr()), 0, pages, out)
}

// launchHash runs gmig_xxh64_pages over n pages at base (page numbers
// from list when it is nonzero) into out, and waits for it.
func (b *NVIDIA) launchHash(base uint64, list cuda.DevPtr, n uint64, out cuda.DevPtr) error {
	if err := b.settleGrids(); err != nil {
		return err
	}
	grid := uint32((4*n + blockThreads - 1) / blockThreads)
	if err := b.dev.Launch(b.g.fn.hashPages, grid, blockThreads, b.stream, base, uint64(list), n, uint64(out)); err != nil {
		return err
	}
	return b.dev.Sync(b.stream)
}

// diffPages returns the pages whose before and after hashes differ,
// ascending.
func (b *NVIDIA) diffPages(pages uint64) ([]uint32, error) {
	if err := b.settleGrids(); err != nil {
		return nil, err
	}
	changed, err := b.mods.list.run(b.g, b.dev, b.stream, b.mods.before, b.mods.after, pages)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(changed)
	slices.Sort(out)
	return out, nil
}

// Place moves the mirror to device address va without copying (the same
// physical memory, mapped there) when the driver grants that address, so
// that device pointers a guest kernel stored in graphics memory stay
// valid; otherwise it stays. It returns where the mirror is. va 0 asks
// nothing.
func (b *NVIDIA) Place(va uint64) (uint64, error) {
	if va != 0 && va != uint64(b.mirror.Addr()) {
		moved, err := b.mirror.Move(cuda.DevPtr(va))
		if err != nil {
			return uint64(b.mirror.Addr()), err
		}
		b.log.Info().Bool("moved", moved).Uint64("asked", va).Uint64("base", uint64(b.mirror.Addr())).
			Msg("nvidia: device mirror placement")
	}
	return uint64(b.mirror.Addr()), nil
}

// LaunchModuleParams is LAUNCH_PARAMS (docs/device-abi.md §6.9, ABI 1.2).
// Not yet on this back end: a parameter buffer holds device addresses,
// and this back end's guest kernels see graphics memory at its own device
// address, not at the guest's graphics addresses (docs/nvidia.md). The
// guest sees a KERNEL error.
func (b *NVIDIA) LaunchModuleParams(handle uint32, _ uint64, _ []byte) ([]gtt.Extent, error) {
	return nil, fmt.Errorf("%w: module %d: parameter-buffer launches are not yet on the nvidia back end", engine.ErrBadKernel, handle)
}
