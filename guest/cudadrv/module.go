package cudadrv

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"regexp"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/engine/ptxparam"
	"github.com/gmig-dev/gmig/guest"
)

// Modules. The vGPU runs guest PTX (KERNEL_LOAD_MODULE, docs/device-abi.md
// §6.8) only where CAPS announces guest modules (the CUDA back end, on a
// vGPU created with them). Elsewhere — the software back end — every
// module load answers CUDA_ERROR_NOT_SUPPORTED: the device cannot run any
// image, whatever its form. Where modules run, a PTX image (or the PTX in a
// fatbin) loads; a cubin holds machine code for a real GPU and answers
// CUDA_ERROR_NO_BINARY_FOR_GPU, as the driver does for a binary built for
// another architecture.

// Image magic numbers: an ELF file (a cubin) starts with 0x7f 'E' 'L' 'F';
// a fatbin with the 32-bit little-endian 0xBA55ED50 (fatbinary.h,
// FATBIN_MAGIC).
var (
	elfMagic    = []byte{0x7f, 'E', 'L', 'F'}
	fatbinMagic = uint32(0xBA55ED50)
)

// PTX syntax (PTX ISA, "Kernel Function Parameters" and "Variables"):
// an entry's name and a module-scope .global variable (parameter lists are
// engine/ptxparam's).
var (
	reEntry  = regexp.MustCompile(`\.entry\s+([A-Za-z_$%][\w$]*)\s*\(`)
	reGlobal = regexp.MustCompile(`(?m)^\s*(?:\.visible\s+)?\.global\s+[^;]*?([A-Za-z_$][\w$]*)\s*(?:\[[^\]]*\])?\s*(?:=[^;]*)?;`)
)

type module struct {
	ctx     *context
	ptx     []byte
	entries map[string]bool
	globals map[string]bool
	funcs   map[string]*function
}

func (m *module) owner() *context { return m.ctx }

type function struct {
	h      Handle
	mod    *module
	name   string
	layout ptxparam.Layout
	kernel uint32 // the device's kernel object handle
	grid   bool   // launched with LAUNCH_GRID (CAPS bit 7), else LAUNCH
}

func (f *function) owner() *context { return f.mod.ctx }

// ModuleLoadData is cuModuleLoadData (and cuModuleLoadDataEx, cuModuleLoad
// once the file is read).
func (l *Lib) ModuleLoadData(t Thread, image []byte) (Handle, Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, r := l.currentLocked(t)
	if r != Success {
		return 0, r
	}
	if l.d.Caps()&abi.CapModules == 0 {
		return 0, l.fail(ErrNotSupported, fmt.Errorf("cudadrv: loading a %d-byte module: the vGPU runs no guest modules (CAPS %#x)", len(image), l.d.Caps()))
	}
	ptx, r := modulePTX(image)
	if r != Success {
		return 0, r
	}
	m := &module{ctx: c, ptx: ptx, entries: map[string]bool{}, globals: map[string]bool{}, funcs: map[string]*function{}}
	for _, e := range reEntry.FindAllSubmatch(ptx, -1) {
		m.entries[string(e[1])] = true
	}
	for _, g := range reGlobal.FindAllSubmatch(ptx, -1) {
		m.globals[string(g[1])] = true
	}
	return l.newHandleLocked(m), Success
}

// modulePTX finds the PTX text of an image.
func modulePTX(image []byte) ([]byte, Result) {
	switch {
	case len(image) == 0:
		return nil, ErrInvalidValue
	case bytes.HasPrefix(image, elfMagic):
		return nil, ErrNoBinaryForGPU
	case len(image) >= 4 && binary.LittleEndian.Uint32(image) == fatbinMagic:
		// Uncompressed PTX inside the fatbin: from ".version" to its NUL.
		i := bytes.Index(image, []byte(".version"))
		if i < 0 {
			return nil, ErrNoBinaryForGPU
		}
		p := image[i:]
		if j := bytes.IndexByte(p, 0); j >= 0 {
			p = p[:j]
		}
		return p, Success
	}
	if j := bytes.IndexByte(image, 0); j >= 0 {
		image = image[:j]
	}
	if !bytes.Contains(image, []byte(".version")) || !bytes.Contains(image, []byte(".entry")) {
		return nil, ErrInvalidImage
	}
	return image, Success
}

// ModuleUnload is cuModuleUnload.
func (l *Lib) ModuleUnload(h Handle) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.readyLocked(); r != Success {
		return r
	}
	m, ok := l.objs[h].(*module)
	if !ok {
		return ErrInvalidHandle
	}
	r := l.unloadLocked(m)
	delete(l.objs, h)
	for fh, o := range l.objs {
		if f, ok := o.(*function); ok && f.mod == m {
			delete(l.objs, fh)
		}
	}
	return r
}

// unloadLocked unloads m's kernels from the device.
func (l *Lib) unloadLocked(m *module) Result {
	r := Success
	for _, f := range m.funcs {
		if rr := l.submitLocked(l.d.UnloadKernel(f.kernel)); rr != Success {
			r = rr
		}
	}
	m.funcs = map[string]*function{}
	return r
}

// ModuleGetFunction is cuModuleGetFunction: the entry's kernel object is
// loaded on the device (KERNEL_LOAD_MODULE) the first time it is asked for.
// Its parameter layout is the PTX's (engine/ptxparam). Where the device
// runs LAUNCH_GRID (CAPS bit 7) any entry whose buffer fits 4096 bytes
// loads. Elsewhere the device calls a kernel with the address of graphics
// memory as its first parameter (§6.8), so an entry needs that one and 1
// to 8 more of at most 8 bytes each.
func (l *Lib) ModuleGetFunction(h Handle, name string) (Handle, Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.readyLocked(); r != Success {
		return 0, r
	}
	m, ok := l.objs[h].(*module)
	if !ok {
		return 0, ErrInvalidHandle
	}
	if f, ok := m.funcs[name]; ok {
		return f.h, Success
	}
	if !m.entries[name] {
		return 0, ErrNotFound
	}
	layout, err := ptxparam.Of(m.ptx, name)
	if err != nil {
		return 0, l.fail(ErrInvalidPTX, fmt.Errorf("cudadrv: kernel %s: %w", name, err))
	}
	grid := l.d.Caps()&abi.CapLaunchGrid != 0
	nargs := uint32(min(max(len(layout.Params), 1), abi.LaunchMaxArgs))
	switch {
	case grid && layout.Size > maxParamBytes:
		return 0, l.fail(ErrNotSupported, fmt.Errorf("cudadrv: kernel %s has %d bytes of parameters; the device takes at most %d", name, layout.Size, maxParamBytes))
	case !grid && (len(layout.Params) < 2 || len(layout.Params) > 1+abi.LaunchMaxArgs):
		return 0, l.fail(ErrNotSupported, fmt.Errorf("cudadrv: kernel %s has %d parameters; the device calls kernels with 2 to %d", name, len(layout.Params), 1+abi.LaunchMaxArgs))
	case !grid:
		nargs = uint32(len(layout.Params) - 1)
		for _, p := range layout.Params {
			if p.Size > 8 {
				return 0, l.fail(ErrNotSupported, fmt.Errorf("cudadrv: kernel %s: parameter %s has %d bytes; the device passes 8", name, p.Name, p.Size))
			}
		}
	}
	kernel, r := l.loadKernelLocked(name, m.ptx, nargs)
	if r != Success {
		return 0, r
	}
	f := &function{mod: m, name: name, layout: layout, kernel: kernel, grid: grid}
	m.funcs[name] = f
	f.h = l.newHandleLocked(f)
	return f.h, Success
}

// loadKernelLocked stages the module image in the aperture, loads it as a
// new kernel object and waits for the device's verdict.
func (l *Lib) loadKernelLocked(entry string, ptx []byte, nargs uint32) (uint32, Result) {
	img := guest.ModuleImage(entry, ptx)
	if len(img) > abi.ModuleMaxImage || len(entry) > abi.ModuleMaxEntry {
		return 0, ErrInvalidImage
	}
	ga, err := l.d.Alloc(uint64(len(img)))
	if err != nil {
		return 0, l.fail(ErrOutOfMemory, fmt.Errorf("cudadrv: staging module %s: %w", entry, err))
	}
	defer l.d.Free(ga)
	if r := l.syncLocked(); r != Success {
		return 0, r
	}
	if err := l.d.WriteGA(ga, img); err != nil {
		return 0, l.fail(ErrUnknown, fmt.Errorf("cudadrv: staging module %s: %w", entry, err))
	}
	l.kernels++
	k := l.kernels
	cmd := guest.AppendKernelLoadModule(nil, k, nargs, ga, uint32(len(img)))
	if r := l.submitLocked(l.d.Submit(cmd)); r != Success {
		return 0, r
	}
	if r := l.syncLocked(); r != Success {
		return 0, l.fail(ErrInvalidPTX, fmt.Errorf("cudadrv: loading kernel %s: %v", entry, r))
	}
	return k, Success
}

// ModuleGetGlobal is cuModuleGetGlobal_v2. A module's .global variables
// live in the host GPU's module memory, which the guest cannot address:
// one the PTX declares answers CUDA_ERROR_NOT_SUPPORTED, another name
// CUDA_ERROR_NOT_FOUND.
func (l *Lib) ModuleGetGlobal(h Handle, name string) (uint64, uint64, Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.readyLocked(); r != Success {
		return 0, 0, r
	}
	m, ok := l.objs[h].(*module)
	if !ok {
		return 0, 0, ErrInvalidHandle
	}
	if !m.globals[name] {
		return 0, 0, ErrNotFound
	}
	return 0, 0, l.fail(ErrNotSupported, fmt.Errorf("cudadrv: global %s: module globals are not reachable from the guest", name))
}
