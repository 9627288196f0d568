package engine

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/gtt"
)

// ErrNoModules is wrapped by a back end's refusal of guest modules.
var ErrNoModules = errors.New("engine: this back end runs no guest modules")

// Module is a guest kernel object made by KERNEL_LOAD_MODULE
// (docs/device-abi.md §6.8): plain data, saved with the engine's state so
// that a destination loads it again. The API log records its load as a
// kernel object of kind abi.KernelModule.
type Module struct {
	Handle uint32
	Entry  string // the kernel's .entry name in PTX
	PTX    []byte // the PTX text
	Args   uint32 // LAUNCH arguments it takes (the first is the thread count)
}

// parseModuleImage splits a KERNEL_LOAD_MODULE image: the entry name, a
// NUL byte, the PTX text (docs/device-abi.md §6.8).
func parseModuleImage(img []byte) (entry string, ptx []byte, err error) {
	i := bytes.IndexByte(img, 0)
	switch {
	case i <= 0:
		return "", nil, fmt.Errorf("%w: module image without an entry name and NUL", ErrBadKernel)
	case i > abi.ModuleMaxEntry:
		return "", nil, fmt.Errorf("%w: entry name of %d bytes (at most %d)", ErrBadKernel, i, abi.ModuleMaxEntry)
	case i+1 == len(img):
		return "", nil, fmt.Errorf("%w: module image without PTX", ErrBadKernel)
	}
	ptx = img[i+1:]
	if j := bytes.IndexByte(ptx, 0); j >= 0 {
		ptx = ptx[:j] // a NUL ends the text
	}
	return string(img[:i]), bytes.Clone(ptx), nil
}

func (e *Engine) execKernelLoadModule(c KernelLoadModule) result {
	switch {
	case c.Handle == 0:
		return kernelFail("handle 0")
	case c.Args == 0 || c.Args > abi.LaunchMaxArgs:
		return kernelFail("module with %d arguments (want 1..%d)", c.Args, abi.LaunchMaxArgs)
	case c.Len == 0 || c.Len > abi.ModuleMaxImage:
		return kernelFail("module image of %d bytes (want 1..%d)", c.Len, abi.ModuleMaxImage)
	case badRange(c.Image, uint64(c.Len)):
		return kernelFail("module image range overflows")
	}
	e.mu.Lock()
	_, inUse := e.kernels[c.Handle]
	full := len(e.kernels) >= abi.MaxKernels
	e.mu.Unlock()
	if inUse {
		return kernelFail("handle %d in use", c.Handle)
	}
	if full {
		return kernelFail("%d kernels loaded already", abi.MaxKernels)
	}
	xs, err := e.resolve(c.Image, uint64(c.Len), false)
	if err != nil {
		return fail(abi.ErrPageFault, err)
	}
	img := make([]byte, c.Len)
	if err := e.cfg.Backend.Read(img, xs); err != nil {
		return e.backendFail(err, nil)
	}
	entry, ptx, err := parseModuleImage(img)
	if err != nil {
		return fail(abi.ErrKernel, err)
	}
	m := Module{Handle: c.Handle, Entry: entry, PTX: ptx, Args: c.Args}
	if err := e.cfg.Backend.LoadModule(c.Handle, m); err != nil {
		return fail(abi.ErrKernel, fmt.Errorf("engine: %s back end: %w", e.cfg.Backend.Name(), err))
	}
	e.mu.Lock()
	e.kernels[c.Handle] = abi.KernelModule
	e.modules[c.Handle] = m
	e.mu.Unlock()
	e.cfg.Events.KernelLoaded(c.Handle, abi.KernelModule)
	return result{}
}

// launchModule runs a guest module (§6.8): the back end reports the pages
// it changed.
func (e *Engine) launchModule(handle uint32, args []uint64) result {
	xs, err := e.cfg.Backend.LaunchModule(handle, args)
	if err != nil {
		r := fail(abi.ErrKernel, fmt.Errorf("engine: %s back end: %w", e.cfg.Backend.Name(), err))
		r.wrote = xs
		return r
	}
	return result{wrote: xs}
}

// sortedModules returns the loaded modules by handle.
func sortedModules(ms map[uint32]Module) []Module {
	out := make([]Module, 0, len(ms))
	for _, m := range ms {
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b Module) int { return cmp.Compare(a.Handle, b.Handle) })
	return out
}

// The software back end runs only the built-in kernels.

func (s *software) LoadModule(uint32, Module) error {
	return fmt.Errorf("%w: the software back end runs only the built-in kernels (docs/device-abi.md §7); guest modules need the nvidia back end", ErrNoModules)
}

func (s *software) UnloadModule(uint32) error {
	return fmt.Errorf("%w: the software back end has no guest modules", ErrNoModules)
}

func (s *software) LaunchModule(uint32, []uint64) ([]gtt.Extent, error) {
	return nil, fmt.Errorf("%w: the software back end has no guest modules", ErrNoModules)
}

func (s *software) LaunchModuleParams(uint32, uint64, []byte) ([]gtt.Extent, error) {
	return nil, fmt.Errorf("%w: the software back end has no guest modules", ErrNoModules)
}

func (s *software) LaunchGrid(uint32, Grid, []byte) error {
	return fmt.Errorf("%w: the software back end runs no modules", ErrNoModules)
}

func (s *software) Place(uint64) (uint64, error) { return 0, nil }
