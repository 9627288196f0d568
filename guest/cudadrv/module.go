package cudadrv

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"regexp"
	"strconv"

	"github.com/gmig-dev/gmig/abi"
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
// an entry's parameter list and a module-scope .global variable.
var (
	reEntry  = regexp.MustCompile(`\.entry\s+([A-Za-z_$%][\w$]*)\s*\(([^)]*)\)`)
	reParam  = regexp.MustCompile(`\.param\s+\.([a-z]+)(\d+)`)
	reGlobal = regexp.MustCompile(`(?m)^\s*(?:\.visible\s+)?\.global\s+[^;]*?([A-Za-z_$][\w$]*)\s*(?:\[[^\]]*\])?\s*(?:=[^;]*)?;`)
)

type module struct {
	ctx     *context
	ptx     []byte
	entries map[string][]int // entry -> parameter sizes in bytes
	globals map[string]bool
	funcs   map[string]*function
}

func (m *module) owner() *context { return m.ctx }

type function struct {
	h      Handle
	mod    *module
	name   string
	params []int
	kernel uint32 // the device's kernel object handle
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
	m := &module{ctx: c, ptx: ptx, entries: map[string][]int{}, globals: map[string]bool{}, funcs: map[string]*function{}}
	for _, e := range reEntry.FindAllSubmatch(ptx, -1) {
		var sizes []int
		for _, p := range reParam.FindAllSubmatch(e[2], -1) {
			bits, _ := strconv.Atoi(string(p[2])) // \d+ matched it
			sizes = append(sizes, max(bits/8, 1))
		}
		m.entries[string(e[1])] = sizes
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
// The device passes a kernel the address of graphics memory as its first
// parameter, so an entry needs that one and 1 to 8 more.
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
	params, ok := m.entries[name]
	if !ok {
		return 0, ErrNotFound
	}
	if len(params) < 2 || len(params) > 1+abi.LaunchMaxArgs {
		return 0, l.fail(ErrNotSupported, fmt.Errorf("cudadrv: kernel %s has %d parameters; the device calls kernels with 2 to %d", name, len(params), 1+abi.LaunchMaxArgs))
	}
	kernel, r := l.loadKernelLocked(name, m.ptx, uint32(len(params)-1))
	if r != Success {
		return 0, r
	}
	f := &function{mod: m, name: name, params: params, kernel: kernel}
	m.funcs[name] = f
	f.h = l.newHandleLocked(f)
	return f.h, Success
}

// loadKernelLocked stages the module image in graphics memory, loads it as
// a new kernel object and waits for the device's verdict.
func (l *Lib) loadKernelLocked(entry string, ptx []byte, nargs uint32) (uint32, Result) {
	img := guest.ModuleImage(entry, ptx)
	if len(img) > abi.ModuleMaxImage || len(entry) > abi.ModuleMaxEntry {
		return 0, ErrInvalidImage
	}
	ga, err := l.mem.Alloc(uint64(len(img)))
	if err != nil {
		return 0, l.fail(ErrOutOfMemory, fmt.Errorf("cudadrv: staging module %s: %w", entry, err))
	}
	defer l.mem.Free(ga)
	if r := l.syncLocked(); r != Success {
		return 0, r
	}
	if err := l.mem.Write(ga, img); err != nil {
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

// FuncParams are the sizes in bytes of f's parameters, for the C side to
// read cuLaunchKernel's kernelParams.
func (l *Lib) FuncParams(f Handle) ([]int, Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fn, ok := l.objs[f].(*function)
	if !ok {
		return nil, ErrInvalidHandle
	}
	return fn.params, Success
}

// LaunchKernel is cuLaunchKernel: one LAUNCH on the ring, not waited for.
// params are the kernel's parameters as FuncParams sized them; the first
// (the graphics memory's device address) is the device's to give, so it is
// not sent. The device runs ceil(params[1] / 256) blocks of 256 threads
// (docs/device-abi.md §6.8): grid and block are checked against that
// model, not used.
func (l *Lib) LaunchKernel(t Thread, f Handle, grid, block [3]uint32, shared uint32, s Handle, params [][]byte) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.streamOpLocked(t, s); r != Success {
		return r
	}
	fn, ok := l.objs[f].(*function)
	if !ok {
		return ErrInvalidHandle
	}
	if len(params) != len(fn.params) || block[0]*block[1]*block[2] > blockThreads || grid[0] == 0 || block[0] == 0 {
		return ErrInvalidValue
	}
	args := make([]uint64, 0, len(params)-1)
	for _, p := range params[1:] {
		var b [8]byte
		copy(b[:], p)
		args = append(args, binary.LittleEndian.Uint64(b[:]))
	}
	return l.submitLocked(l.d.Launch(fn.kernel, args...))
}
