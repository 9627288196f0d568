package nvidia

import (
	"errors"
	"fmt"

	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/internal/cuda"
)

// LAUNCH_GRID on the NVIDIA back end (docs/device-abi.md §6.10,
// docs/nvidia.md "Kernel launches with grids"): cuLaunchKernel with the
// guest's parameter buffer passed unchanged, on the back end's stream,
// asynchronously. Nothing is uploaded, hashed or waited for around it: the
// kernel reaches device-local memory only, whose changes a migration finds
// with the GPU page hash. A kernel that faults makes a later stream
// operation fail; while launches are outstanding, that failure is
// reported as engine.ErrLaunchFailed.

// LaunchGrid queues module handle's kernel on grid g with params.
func (b *NVIDIA) LaunchGrid(handle uint32, g engine.Grid, params []byte) error {
	if b.mods == nil {
		return fmt.Errorf("%w: guest modules are off for this vGPU", engine.ErrNoModules)
	}
	m, ok := b.mods.byHandle[handle]
	if !ok {
		return fmt.Errorf("%w: no module %d in the back end", engine.ErrBadKernel, handle)
	}
	b.stats.Commands.Add(1)
	err := b.dev.LaunchBuffer(m.fn, [3]uint32{g.X, g.Y, g.Z}, [3]uint32{g.BlockX, g.BlockY, g.BlockZ}, g.SharedBytes, b.stream, params)
	if err != nil {
		if b.grids > 0 { // an earlier kernel's failure, sticky in the context
			b.grids = 0
			return fmt.Errorf("nvidia: %w: %w", engine.ErrLaunchFailed, err)
		}
		return fmt.Errorf("%w: launching module %d: %w", engine.ErrBadKernel, handle, err)
	}
	b.grids++
	return nil
}

// settleGrids waits for the outstanding LAUNCH_GRID kernels, if any: their
// failure wraps engine.ErrLaunchFailed.
func (b *NVIDIA) settleGrids() error {
	if b.grids == 0 {
		return nil
	}
	b.grids = 0
	if err := b.dev.Sync(b.stream); err != nil {
		return fmt.Errorf("nvidia: %w: %w", engine.ErrLaunchFailed, err)
	}
	return nil
}

// syncAll is Sync: the grid kernels' outcome, and every pending byte
// written back to the window even when a kernel failed.
func (b *NVIDIA) syncAll() error {
	gerr := b.settleGrids()
	return errors.Join(gerr, b.writeBackAll())
}

// Device buffers outside graphics memory, at device addresses a
// LAUNCH_GRID kernel reaches, for tests and tools that give kernels
// buffers without going through device-local memory. They use
// the back end's stream, so call them with the engine idle (after a
// FENCE, which waits for the kernels).

// DeviceAlloc returns n bytes of device memory.
func (b *NVIDIA) DeviceAlloc(n uint64) (uint64, error) {
	p, err := b.dev.Alloc(n)
	return uint64(p), err
}

// DeviceFree frees what DeviceAlloc returned.
func (b *NVIDIA) DeviceFree(addr uint64) error { return b.dev.Free(cuda.DevPtr(addr)) }

// DeviceWrite copies src to device address addr and waits for it.
func (b *NVIDIA) DeviceWrite(addr uint64, src []byte) error {
	if err := b.dev.CopyHtoD(cuda.DevPtr(addr), src, b.stream); err != nil {
		return err
	}
	return b.dev.Sync(b.stream)
}

// DeviceRead copies len(dst) bytes at device address addr into dst.
func (b *NVIDIA) DeviceRead(dst []byte, addr uint64) error {
	if err := b.dev.CopyDtoH(dst, cuda.DevPtr(addr), b.stream); err != nil {
		return err
	}
	return b.dev.Sync(b.stream)
}
