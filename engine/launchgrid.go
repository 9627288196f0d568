package engine

import (
	"errors"
	"fmt"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/engine/ptxparam"
)

// LAUNCH_GRID (docs/device-abi.md §6.10, ABI 1.3): a guest module on a
// grid of blocks with a parameter buffer, as cuLaunchKernel runs it. The
// kernel reaches device-local memory only, through device addresses, so
// the engine neither resolves nor reports its writes (the back end tracks
// them) and the launch may still be running when the command retires: a
// kernel that fails is found at the next sync point (a FENCE, a drained
// ring, a quiesce, or the next back-end operation) and reported then as
// the launch's fault.

// ErrLaunchFailed is wrapped by a back end's report that a kernel it
// launched for LAUNCH_GRID failed on the device (CUDA_ERROR_LAUNCH_FAILED
// and the other errors a faulting kernel leaves). The launch retired
// before; the engine reports the fault when the report comes.
var ErrLaunchFailed = errors.New("engine: a launched kernel failed")

// StickyCode is the CUDA code a back end's error carries when the device
// context the vGPU runs in is lost for good — a faulting kernel left a
// sticky error in it (as CUDA does), or the process holding it is gone —
// else 0. Errors say so by implementing StickyCode() uint32 anywhere in
// their chain (cuda.Error does, and so does the GPU worker's client). A
// command that fails with one answers that code on its stream, as the CUDA
// call that does the same work would (docs/device-abi.md §6.10).
func StickyCode(err error) uint32 {
	var s interface{ StickyCode() uint32 }
	if errors.As(err, &s) {
		return s.StickyCode()
	}
	return 0
}

// paramLayout is a guest module's parameter-buffer size as its PTX
// declares it, or why the PTX cannot say.
type paramLayout struct {
	size uint32
	err  error
}

// gridLaunch is the latest LAUNCH_GRID that retired: the launch a later
// ErrLaunchFailed is reported against (a back end reports it only while
// some launch may still be running, and the latest one is).
type gridLaunch struct {
	known          bool
	offset, stream uint32
}

// checkGrid checks a LAUNCH_GRID's shape against the limits of §6.10.
func checkGrid(g Grid) error {
	switch {
	case g.X == 0 || g.Y == 0 || g.Z == 0 || g.BlockX == 0 || g.BlockY == 0 || g.BlockZ == 0:
		return fmt.Errorf("grid %dx%dx%d of blocks %dx%dx%d has a dimension 0", g.X, g.Y, g.Z, g.BlockX, g.BlockY, g.BlockZ)
	case uint64(g.BlockX)*uint64(g.BlockY)*uint64(g.BlockZ) > abi.LaunchGridMaxBlockThreads:
		return fmt.Errorf("block %dx%dx%d has more than %d threads", g.BlockX, g.BlockY, g.BlockZ, abi.LaunchGridMaxBlockThreads)
	case g.X > launchGridMaxX || g.Y > launchGridMaxYZ || g.Z > launchGridMaxYZ:
		return fmt.Errorf("grid %dx%dx%d exceeds %dx%dx%d", g.X, g.Y, g.Z, launchGridMaxX, launchGridMaxYZ, launchGridMaxYZ)
	case g.SharedBytes > abi.LaunchGridMaxShared:
		return fmt.Errorf("%d bytes of dynamic shared memory (at most %d)", g.SharedBytes, abi.LaunchGridMaxShared)
	}
	return nil
}

// Grid limits of every CUDA GPU since compute capability 3.0 (CUDA C
// Programming Guide, "Compute Capabilities": maximum x-dimension of a grid
// 2^31-1, y and z 65535), as docs/device-abi.md §6.10 states them.
const (
	launchGridMaxX  = 1<<31 - 1
	launchGridMaxYZ = 65535
)

// gridFail is a LAUNCH_GRID or LAUNCH_PARAMS refused before launching: a
// KERNEL error whose stream code is cuda (§6.9, §6.10).
func gridFail(cuda uint32, format string, args ...any) result {
	r := kernelFail(format, args...)
	r.cuda = cuda
	return r
}

// execLaunchGrid runs LAUNCH_GRID: checks, reads the parameter buffer
// through the GTT into the engine's own buffer, and hands it to the back
// end. Nothing here allocates on the path of a launch that succeeds.
func (e *Engine) execLaunchGrid(c LaunchGrid) result {
	if r, ok := e.checkModuleLaunch("LAUNCH_GRID", c.Handle, c.Params, c.Len); !ok {
		return r
	}
	if err := checkGrid(c.Grid); err != nil {
		return gridFail(abi.CudaErrorInvalidValue, "LAUNCH_GRID of module %d: %w", c.Handle, err)
	}
	params := e.params[:c.Len]
	if c.Len > 0 {
		xs, err := e.scratchResolve(c.Params, uint64(c.Len))
		if err != nil {
			return fail(abi.ErrPageFault, err)
		}
		if err := e.cfg.Backend.Read(params, xs); err != nil {
			return e.backendFail(err, nil)
		}
	}
	if err := e.cfg.Backend.LaunchGrid(c.Handle, c.Grid, params); err != nil {
		return fail(abi.ErrKernel, fmt.Errorf("engine: %s back end: LAUNCH_GRID of module %d: %w", e.cfg.Backend.Name(), c.Handle, err))
	}
	return result{}
}

// checkModuleLaunch makes the checks LAUNCH_PARAMS and LAUNCH_GRID (op)
// share (§6.9, §6.10): handle is a guest module (else 400), and its n-byte
// parameter buffer at ga is within the limit, its range does not overflow
// and it is as long as the module's PTX parameter layout, read once per
// module (modules are immutable) and cached (else 1). It returns the
// refusal and false, or true.
func (e *Engine) checkModuleLaunch(op string, handle uint32, ga uint64, n uint32) (result, bool) {
	e.mu.Lock()
	kind, ok := e.kernels[handle]
	m := e.modules[handle]
	layout, cached := e.layouts[handle]
	e.mu.Unlock()
	switch {
	case !ok:
		return gridFail(abi.CudaErrorInvalidHandle, "%s of unknown handle %d", op, handle), false
	case kind != abi.KernelModule:
		return gridFail(abi.CudaErrorInvalidHandle, "%s of kernel %d, a built-in kernel of kind %d (LAUNCH runs those)", op, handle, kind), false
	case n > abi.LaunchParamsMax:
		return gridFail(abi.CudaErrorInvalidValue, "parameter buffer of %d bytes (at most %d)", n, abi.LaunchParamsMax), false
	case badRange(ga, uint64(n)):
		return gridFail(abi.CudaErrorInvalidValue, "parameter buffer range overflows"), false
	}
	if !cached {
		layout = e.cacheLayout(m)
	}
	if layout.err != nil {
		return gridFail(abi.CudaErrorInvalidValue, "module %d: %w", handle, layout.err), false
	}
	if layout.size != n {
		return gridFail(abi.CudaErrorInvalidValue, "module %d's parameters take %d bytes, the buffer has %d", handle, layout.size, n), false
	}
	return result{}, true
}

// cacheLayout reads m's layout and caches it while m is still loaded.
func (e *Engine) cacheLayout(m Module) paramLayout {
	lay, err := ptxparam.Of(m.PTX, m.Entry)
	l := paramLayout{size: lay.Size, err: err}
	e.mu.Lock()
	if _, loaded := e.modules[m.Handle]; loaded {
		e.layouts[m.Handle] = l
	}
	e.mu.Unlock()
	return l
}

// launchFailed reports a LAUNCH_GRID kernel's failure that err (from a
// back-end operation) carries, if it does: a KERNEL fault at the latest
// launch's ring offset (0 if no launch is known since the last reset),
// and CUDA_ERROR_LAUNCH_FAILED on its stream. It returns whether err was
// one; the caller goes on as if its operation had succeeded.
func (e *Engine) launchFailed(err error) bool {
	if !errors.Is(err, ErrLaunchFailed) {
		return false
	}
	g := e.lastGrid
	e.lastGrid = gridLaunch{}
	f := Fault{Code: abi.ErrKernel, RingOffset: g.offset, Opcode: abi.OpLaunchGrid, Err: err}
	e.mu.Lock()
	e.noteStreamLocked(result{code: abi.ErrKernel, op: abi.OpLaunchGrid, cuda: abi.CudaErrorLaunchFailed, stream: g.stream})
	e.mu.Unlock()
	e.log.Warn().Err(err).Bool("launch_known", g.known).Uint32("ring_offset", g.offset).Uint32("stream", g.stream).
		Msg("engine: a LAUNCH_GRID kernel failed")
	e.cfg.Events.Faulted(f)
	return true
}

// sync is Backend.Sync that reports a launched kernel's failure the sync
// finds (launchFailed); any other error is returned.
func (e *Engine) sync() error {
	err := e.cfg.Backend.Sync()
	if err == nil {
		e.unsynced = false
	}
	if err != nil && e.launchFailed(err) {
		return nil
	}
	return err
}
