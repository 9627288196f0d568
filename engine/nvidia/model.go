package nvidia

// A software model of a CUDA device (gpuDevice): device addresses name Go
// byte slices, kernels.cu's kernels are played in Go. The NVIDIA back end
// runs on it unchanged, so its bookkeeping (pending ranges, pieces, gaps,
// scratch, write-back, guest-module page diffs) can be checked, under the
// race detector, on machines without a GPU: the engine's tests use it
// directly, and OpenGPU returns it when GMIG_CUDA_MODEL=N (ModelEnv: N
// model GPUs, each with its own memory and UUID), so that the cuda-tagged
// tests of other packages, gmig-nvbench and gmigd's choice of GPU run on
// it too.
// The model runs the guest module the LAUNCH tests load ("scale") and the
// LAUNCH_GRID test kernels (model_kernels.go).

import (
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"sync"

	"github.com/cespare/xxhash/v2"

	"github.com/gmig-dev/gmig/engine/cpuref"
	"github.com/gmig-dev/gmig/internal/cuda"
)

// Function numbers of the model's kernels.
const (
	mCopy cuda.Function = iota + 1
	mFill
	mSaxpy
	mStencil
	mRender
	mHash
	mDiff
	mScale // the guest module of the module tests
	mNop   // gmig-nvbench's empty guest module
)

type modelRegion struct {
	base cuda.DevPtr
	mem  []byte
}

type modelDevice struct {
	// run serialises the device's work (launches, copies) as a GPU's
	// ordered execution would make it look to its callers: the back end
	// (engine goroutine) and a migration's reader of local memory
	// (another goroutine, its own stream) touch the same bytes.
	run     sync.Mutex
	mu      sync.Mutex // regions, next, streams
	next    cuda.DevPtr
	regions []modelRegion // sorted by base
	streams int
	mapped  map[cuda.DevPtr]bool // mappings' bases (for Move)
	grid    gridState            // guest grid kernels (model_kernels.go)
}

// NewModelGPU returns a GPU backed by the software model of a CUDA device
// (described as model GPU 0): the NVIDIA back end on it runs everywhere,
// for tests (engine's among them) on machines without a GPU. Each call
// makes a device of its own.
func NewModelGPU() *GPU { return newModelGPU(0) }

// modelSpan is how much device address space each model GPU of ModelEnv
// allocates from (1 TiB), so that the GPUs' addresses never meet: a
// destination on another model GPU can get a source's device addresses, as
// a destination in another process or on another host can.
const modelSpan = 1 << 40

// newModelGPU is NewModelGPU for model GPU ordinal: its own address range.
func newModelGPU(ordinal int) *GPU {
	d := &modelDevice{next: 0x7f0000000000 + cuda.DevPtr(ordinal)*modelSpan, mapped: map[cuda.DevPtr]bool{}}
	return &GPU{ops: d, model: modelInfo(0), fill: 8, fn: gpuKernels{
		copyPieces: mCopy, fillPieces: mFill, saxpy: mSaxpy, stencil: mStencil,
		render: mRender, hashPages: mHash, diffHashes: mDiff,
	}}
}

// modelAlign is the model's allocation granularity: 2 MiB, the H100's
// (cuMemGetAllocationGranularity), so that mapping addresses are aligned
// as on the GPU.
const modelAlign = 1 << 21

func (d *modelDevice) add(mem []byte) cuda.DevPtr {
	d.mu.Lock()
	defer d.mu.Unlock()
	base := d.next
	d.next += (cuda.DevPtr(len(mem)) + 2*modelAlign - 1) &^ (modelAlign - 1) // a 2 MiB gap after each
	d.insertLocked(base, mem)
	return base
}

func (d *modelDevice) insertLocked(base cuda.DevPtr, mem []byte) {
	d.regions = append(d.regions, modelRegion{base, mem})
	sort.Slice(d.regions, func(i, j int) bool { return d.regions[i].base < d.regions[j].base })
}

// freeLocked reports whether no region overlaps [addr, addr+n), except
// the one at skip (a mapping that moves may overlap itself).
func (d *modelDevice) freeLocked(addr cuda.DevPtr, n uint64, skip cuda.DevPtr) bool {
	for _, r := range d.regions {
		if r.base != skip && addr < r.base+cuda.DevPtr(len(r.mem)) && r.base < addr+cuda.DevPtr(n) {
			return false
		}
	}
	return addr != 0 && addr%modelAlign == 0
}

func (d *modelDevice) remove(base cuda.DevPtr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, r := range d.regions {
		if r.base == base {
			d.regions = append(d.regions[:i], d.regions[i+1:]...)
			return nil
		}
	}
	return fmt.Errorf("model: no region at %#x", base)
}

// at returns the n bytes at device address p.
func (d *modelDevice) at(p uint64, n uint64) []byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, r := range d.regions {
		if uint64(r.base) <= p && p+n <= uint64(r.base)+uint64(len(r.mem)) {
			o := p - uint64(r.base)
			return r.mem[o : o+n : o+n]
		}
	}
	panic(fmt.Sprintf("model: device access [%#x, +%#x) outside every allocation", p, n))
}

func (d *modelDevice) NewStream() (cuda.Stream, error) {
	if err := d.lost("cuStreamCreate"); err != nil {
		return 0, err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.streams++
	return cuda.Stream(d.streams), nil
}
func (d *modelDevice) DestroyStream(cuda.Stream) error { return nil }
func (d *modelDevice) Sync(cuda.Stream) error          { return d.lost("cuStreamSynchronize") }
func (d *modelDevice) HostRegister(b []byte) (cuda.DevPtr, error) {
	if err := d.lost("cuMemHostRegister"); err != nil {
		return 0, err
	}
	return d.add(b), nil
}
func (d *modelDevice) HostUnregister(b []byte) error {
	d.mu.Lock()
	var base cuda.DevPtr
	for _, r := range d.regions {
		if len(r.mem) > 0 && &r.mem[0] == &b[0] {
			base = r.base
		}
	}
	d.mu.Unlock()
	return d.remove(base)
}
func (d *modelDevice) AllocHostMapped(n uint64) ([]byte, cuda.DevPtr, error) {
	if err := d.lost("cuMemHostAlloc"); err != nil {
		return nil, 0, err
	}
	b := make([]byte, n)
	return b, d.add(b), nil
}
func (d *modelDevice) FreeHost(b []byte) error { return d.HostUnregister(b) }
func (d *modelDevice) Alloc(n uint64) (cuda.DevPtr, error) {
	if err := d.lost("cuMemAlloc"); err != nil {
		return 0, err
	}
	return d.add(make([]byte, n)), nil
}
func (d *modelDevice) Free(p cuda.DevPtr) error { return d.remove(p) }

type modelMapping struct {
	d    *modelDevice
	base cuda.DevPtr
}

// NewMapping maps size bytes (rounded up to modelAlign) at addr when no
// allocation is there (as cuMemAddressReserve grants a free address it is
// asked for), else anywhere.
func (d *modelDevice) NewMapping(size, _ uint64, addr cuda.DevPtr) (gpuMapping, error) {
	if err := d.lost("cuMemCreate"); err != nil {
		return nil, err
	}
	size = (size + modelAlign - 1) &^ (modelAlign - 1)
	mem := make([]byte, size)
	d.mu.Lock()
	if addr != 0 && d.freeLocked(addr, size, 0) {
		d.insertLocked(addr, mem)
		d.mu.Unlock()
		return &modelMapping{d, addr}, nil
	}
	d.mu.Unlock()
	return &modelMapping{d, d.add(mem)}, nil
}
func (m *modelMapping) Addr() cuda.DevPtr { return m.base }
func (m *modelMapping) Close() error      { return m.d.remove(m.base) }

// Move re-bases the same bytes at addr if no other region overlaps them
// there (as cuda.Mapping.Move gets the address only if the driver
// reserves exactly it).
func (m *modelMapping) Move(addr cuda.DevPtr) (bool, error) {
	d := m.d
	d.mu.Lock()
	defer d.mu.Unlock()
	var size uint64
	for _, r := range d.regions {
		if r.base == m.base {
			size = uint64(len(r.mem))
		}
	}
	if !d.freeLocked(addr, size, m.base) {
		return false, nil
	}
	for i := range d.regions {
		if d.regions[i].base == m.base {
			d.regions[i].base = addr
		}
	}
	sort.Slice(d.regions, func(i, j int) bool { return d.regions[i].base < d.regions[j].base })
	m.base = addr
	return true, nil
}

func (d *modelDevice) CopyHtoD(dst cuda.DevPtr, src []byte, _ cuda.Stream) error {
	d.run.Lock()
	defer d.run.Unlock()
	if err := d.lost("cuMemcpyHtoDAsync"); err != nil {
		return err
	}
	copy(d.at(uint64(dst), uint64(len(src))), src)
	return nil
}

func (d *modelDevice) CopyDtoH(dst []byte, src cuda.DevPtr, _ cuda.Stream) error {
	d.run.Lock()
	defer d.run.Unlock()
	if err := d.lost("cuMemcpyDtoHAsync"); err != nil {
		return err
	}
	copy(dst, d.at(uint64(src), uint64(len(dst))))
	return nil
}

// ModelWrite writes b at device address addr of a model GPU (NewModelGPU,
// ModelEnv) as a guest kernel would: behind the engine's back, so that
// tests can check that a migration finds such writes (by hashing). It
// panics for a real GPU or an address no allocation holds.
func (g *GPU) ModelWrite(addr uint64, b []byte) {
	d := g.ops.(*modelDevice)
	d.run.Lock()
	defer d.run.Unlock()
	copy(d.at(addr, uint64(len(b))), b)
}

// ModelRead reads len(b) bytes at device address addr of a model GPU.
func (g *GPU) ModelRead(b []byte, addr uint64) {
	d := g.ops.(*modelDevice)
	d.run.Lock()
	defer d.run.Unlock()
	copy(b, d.at(addr, uint64(len(b))))
}

func (d *modelDevice) LoadModule([]byte) (cuda.Module, error) {
	if err := d.lost("cuModuleLoadData"); err != nil {
		return 0, err
	}
	return 1, nil
}
func (d *modelDevice) Function(_ cuda.Module, name string) (cuda.Function, error) {
	switch name {
	case "scale":
		return mScale, nil
	case "nop":
		return mNop, nil
	}
	return d.gridFunction(name), nil
}
func (d *modelDevice) UnloadModule(cuda.Module) error { return nil }

// Launch plays the kernel (grid and block sizes do not matter to the
// model, except that a grid of one block for the piece kernels is what
// orders pieces: the model always runs them in order).
func (d *modelDevice) Launch(f cuda.Function, _, _ uint32, _ cuda.Stream, a ...uint64) error {
	d.run.Lock()
	defer d.run.Unlock()
	if err := d.lost("cuLaunchKernel"); err != nil {
		return err
	}
	u32 := func(b []byte) []uint32 { return cpuref.U32View(b) }
	switch f {
	case mCopy, mFill:
		tab := d.at(a[0], 24*a[1])
		for i := uint64(0); i < a[1]; i++ {
			src := binary.LittleEndian.Uint64(tab[24*i:])
			dst := binary.LittleEndian.Uint64(tab[24*i+8:])
			n := binary.LittleEndian.Uint64(tab[24*i+16:])
			if n == 0 {
				continue
			}
			if f == mCopy {
				copy(d.at(dst, n), d.at(src, n))
				continue
			}
			var pat [4]byte
			binary.LittleEndian.PutUint32(pat[:], uint32(a[2]))
			cpuref.FillBytes(d.at(dst, n), pat, int(src&3))
		}
	case mSaxpy:
		n := a[0]
		cpuref.Saxpy(math.Float32frombits(uint32(a[1])), cpuref.F32View(d.at(a[2], 4*n)), cpuref.F32View(d.at(a[3], 4*n)))
	case mStencil:
		w, h := int(a[0]), int(a[1])
		n := uint64(4 * w * h)
		cpuref.StencilRows(w, h, 0, h, cpuref.F32View(d.at(a[2], n)), 0, cpuref.F32View(d.at(a[3], n)))
	case mRender:
		w, h := uint32(a[0]), uint32(a[1])
		cpuref.RenderPixels(w, 0, uint32(a[2]), u32(d.at(a[3], 4*uint64(w)*uint64(h))))
	case mHash:
		base, list, n, out := a[0], a[1], a[2], a[3]
		outs := d.at(out, 8*n)
		for k := uint64(0); k < n; k++ {
			p := k
			if list != 0 {
				p = uint64(binary.LittleEndian.Uint32(d.at(list+4*k, 4)))
			}
			binary.LittleEndian.PutUint64(outs[8*k:], xxhash.Sum64(d.at(base+4096*p, 4096)))
		}
	case mDiff:
		x, y, n := d.at(a[0], 8*a[2]), d.at(a[1], 8*a[2]), a[2]
		list, count := a[3], d.at(a[4], 4)
		for k := uint64(0); k < n; k++ {
			if binary.LittleEndian.Uint64(x[8*k:]) != binary.LittleEndian.Uint64(y[8*k:]) {
				c := binary.LittleEndian.Uint32(count)
				binary.LittleEndian.PutUint32(d.at(list+4*uint64(c), 4), uint32(k))
				binary.LittleEndian.PutUint32(count, c+1)
			}
		}
	case mScale: // base, threads, off, mul
		w := u32(d.at(a[0]+a[2], 4*a[1]))
		for i := range w {
			w[i] *= uint32(a[3])
		}
	case mNop:
	default:
		return fmt.Errorf("model: unknown kernel %d", f)
	}
	return nil
}
