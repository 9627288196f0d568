package engine

import (
	"fmt"
	"math"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/engine/cpuref"
	"github.com/gmig-dev/gmig/gtt"
)

// kernelArity is the number of LAUNCH arguments of each kind (§6.7, §7).
var kernelArity = map[uint32]int{
	abi.KernelSaxpy:   4,
	abi.KernelStencil: 4,
	abi.KernelRender:  4,
}

func kernelFail(format string, args ...any) result {
	return fail(abi.ErrKernel, fmt.Errorf("%w: "+format, append([]any{ErrBadKernel}, args...)...))
}

func (e *Engine) execKernelLoad(c KernelLoad) result {
	if c.Handle == 0 {
		return kernelFail("handle 0")
	}
	if _, ok := kernelArity[c.Kind]; !ok {
		return kernelFail("unknown kind %d", c.Kind)
	}
	e.mu.Lock()
	if _, ok := e.kernels[c.Handle]; ok {
		e.mu.Unlock()
		return kernelFail("handle %d in use", c.Handle)
	}
	if n := len(e.kernels); n >= abi.MaxKernels {
		e.mu.Unlock()
		return kernelFail("%d kernels loaded already", n)
	}
	e.kernels[c.Handle] = c.Kind
	e.mu.Unlock()
	e.cfg.Events.KernelLoaded(c.Handle, c.Kind)
	return result{}
}

func (e *Engine) execKernelUnload(c KernelUnload) result {
	e.mu.Lock()
	kind, ok := e.kernels[c.Handle]
	delete(e.kernels, c.Handle)
	delete(e.modules, c.Handle)
	delete(e.layouts, c.Handle)
	e.mu.Unlock()
	if !ok {
		return kernelFail("unload of unknown handle %d", c.Handle)
	}
	if kind == abi.KernelModule {
		if err := e.cfg.Backend.UnloadModule(c.Handle); err != nil && !e.launchFailed(err) {
			e.log.Warn().Err(err).Uint32("handle", c.Handle).Msg("engine: unloading a guest module")
		}
	}
	e.cfg.Events.KernelUnloaded(c.Handle)
	return result{}
}

func (e *Engine) execLaunch(c Launch) result {
	e.mu.Lock()
	kind, ok := e.kernels[c.Handle]
	m := e.modules[c.Handle]
	e.mu.Unlock()
	if !ok {
		return kernelFail("launch of unknown handle %d", c.Handle)
	}
	if kind == abi.KernelModule {
		if uint32(len(c.Args)) != m.Args {
			return kernelFail("module %d takes %d arguments, got %d", c.Handle, m.Args, len(c.Args))
		}
		return e.launchModule(c.Handle, c.Args)
	}
	if len(c.Args) != kernelArity[kind] {
		return kernelFail("kind %d takes %d arguments, got %d", kind, kernelArity[kind], len(c.Args))
	}
	a := c.Args
	switch kind {
	case abi.KernelSaxpy:
		return e.launchSaxpy(a[0], uint32(a[1]), a[2], a[3])
	case abi.KernelStencil:
		return e.launchStencil(a[0], a[1], a[2], a[3])
	default:
		return e.launchRender(a[0], a[1], a[2], a[3])
	}
}

// kernelBuf checks a kernel buffer at ga of n bytes: 4-byte aligned, at
// most MaxKernelBuffer, not wrapping around the address space.
func kernelBuf(name string, ga, n uint64) (result, bool) {
	switch {
	case ga%4 != 0:
		return kernelFail("%s at %#x not 4-byte aligned", name, ga), false
	case n > cpuref.MaxKernelBuffer:
		return kernelFail("%s of %#x bytes exceeds %#x", name, n, cpuref.MaxKernelBuffer), false
	case badRange(ga, n):
		return kernelFail("%s range %#x+%#x overflows", name, ga, n), false
	}
	return result{}, true
}

// gaOverlap reports whether [a, a+an) and [b, b+bn) share a graphics address.
func gaOverlap(a, an, b, bn uint64) bool {
	return an > 0 && bn > 0 && a < b+bn && b < a+an
}

// kernelCells returns 4*n bytes for n elements, or false if that is above
// MaxKernelBuffer.
func kernelCells(n uint64) (uint64, bool) {
	if n > cpuref.MaxKernelBuffer/4 {
		return 0, false
	}
	return 4 * n, true
}

// resolveKernel resolves a kernel's input and output buffers.
func (e *Engine) resolveKernel(in, out, n uint64) (ins, outs []gtt.Extent, r result, ok bool) {
	ins, err := e.resolve(in, n, false)
	if err != nil {
		return nil, nil, fail(abi.ErrPageFault, err), false
	}
	outs, err = e.resolve(out, n, true)
	if err != nil {
		return nil, nil, fail(abi.ErrPageFault, err), false
	}
	return ins, outs, result{}, true
}

func (e *Engine) launchSaxpy(n uint64, a uint32, x, y uint64) result {
	nb, ok := kernelCells(n)
	if !ok {
		return kernelFail("SAXPY of %d elements exceeds %#x bytes", n, cpuref.MaxKernelBuffer)
	}
	if r, ok := kernelBuf("SAXPY x", x, nb); !ok {
		return r
	}
	if r, ok := kernelBuf("SAXPY y", y, nb); !ok {
		return r
	}
	if gaOverlap(x, nb, y, nb) {
		return kernelFail("SAXPY x %#x and y %#x overlap", x, y)
	}
	if n == 0 {
		return result{}
	}
	xs, ys, r, ok := e.resolveKernel(x, y, nb)
	if !ok {
		return r
	}
	if err := e.cfg.Backend.Saxpy(n, math.Float32frombits(a), xs, ys); err != nil {
		return e.backendFail(err, ys)
	}
	return result{wrote: ys}
}

// gridSize checks a kernel grid's w and h and returns w*h*4.
func gridSize(name string, w, h uint64) (uint64, result, bool) {
	if w > math.MaxUint32 || h > math.MaxUint32 {
		return 0, kernelFail("%s grid %dx%d too large", name, w, h), false
	}
	nb, ok := kernelCells(w * h)
	if !ok {
		return 0, kernelFail("%s grid %dx%d exceeds %#x bytes", name, w, h, cpuref.MaxKernelBuffer), false
	}
	return nb, result{}, true
}

func (e *Engine) launchStencil(w, h, in, out uint64) result {
	if w == 0 || h == 0 {
		return kernelFail("STENCIL grid %dx%d empty", w, h)
	}
	nb, r, ok := gridSize("STENCIL", w, h)
	if !ok {
		return r
	}
	if r, ok := kernelBuf("STENCIL in", in, nb); !ok {
		return r
	}
	if r, ok := kernelBuf("STENCIL out", out, nb); !ok {
		return r
	}
	if gaOverlap(in, nb, out, nb) {
		return kernelFail("STENCIL in %#x and out %#x overlap", in, out)
	}
	ins, outs, r, ok := e.resolveKernel(in, out, nb)
	if !ok {
		return r
	}
	if err := e.cfg.Backend.Stencil(uint32(w), uint32(h), ins, outs); err != nil {
		return e.backendFail(err, outs)
	}
	return result{wrote: outs}
}

func (e *Engine) launchRender(w, h, fb, frame uint64) result {
	nb, r, ok := gridSize("RENDER", w, h)
	if !ok {
		return r
	}
	if r, ok := kernelBuf("RENDER framebuffer", fb, nb); !ok {
		return r
	}
	if nb == 0 {
		return result{}
	}
	xs, err := e.resolve(fb, nb, true)
	if err != nil {
		return fail(abi.ErrPageFault, err)
	}
	if err := e.cfg.Backend.Render(uint32(w), uint32(h), frame, xs); err != nil {
		return e.backendFail(err, xs)
	}
	return result{wrote: xs}
}
