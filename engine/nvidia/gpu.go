package nvidia

import (
	_ "embed"
	"fmt"
	"os"
	"sync"

	"github.com/gmig-dev/gmig/internal/cuda"
)

// kernelsPTX is cuda/kernels.cu compiled by cuda/build.sh.
//
//go:embed cuda/kernels.ptx
var kernelsPTX []byte

// GPU is one NVIDIA GPU as the NVIDIA back ends and page hashers of this
// process share it: the device with its primary context and gmig's own
// kernels, loaded once.
type GPU struct {
	dev   *cuda.Device    // nil for a modelled device (tests)
	model cuda.DeviceInfo // a modelled device's description
	ops   gpuDevice
	fn    gpuKernels
	fill  int // blocks that fill the device at full occupancy (grid-stride kernels)
}

// gpuKernels are the functions of kernels.cu.
type gpuKernels struct {
	copyPieces, fillPieces cuda.Function
	saxpy, stencil, render cuda.Function
	hashPages, diffHashes  cuda.Function
}

var (
	gpuMu     sync.Mutex
	gpus      = map[int]*GPU{} // by CUDA ordinal
	modelGPUs = map[int]*GPU{} // the model's, by ordinal (ModelEnv)
	ptxHook   []byte           // tests: a freshly built module instead of the embedded one
)

// OpenGPU returns GPU ordinal (CUDA's ordinal: Devices, FindUUID) with
// gmig's kernels loaded, once per process. Without a driver or a device
// the error wraps cuda.ErrNoDriver or cuda.ErrNoDevice. With ModelEnv in
// the environment it returns one of the model's GPUs instead (model.go):
// for testing the back end's logic where there is none.
func OpenGPU(ordinal int) (*GPU, error) {
	n, err := modelCount()
	if err != nil {
		return nil, err
	}
	gpuMu.Lock()
	defer gpuMu.Unlock()
	if n > 0 {
		if ordinal < 0 || ordinal >= n {
			return nil, fmt.Errorf("nvidia: %w: ordinal %d of the model's %d GPUs (%s=%d)", cuda.ErrNoDevice, ordinal, n, ModelEnv, n)
		}
		if g, ok := modelGPUs[ordinal]; ok {
			return g, nil
		}
		g := newModelGPU(ordinal)
		g.model = modelInfo(ordinal)
		modelGPUs[ordinal] = g
		return g, nil
	}
	if g, ok := gpus[ordinal]; ok {
		return g, nil
	}
	drv, err := cuda.Open()
	if err != nil {
		return nil, err
	}
	dev, err := drv.Device(ordinal)
	if err != nil {
		return nil, err
	}
	info := dev.Info()
	if !info.VMM || !info.MapHost {
		return nil, fmt.Errorf("nvidia: GPU %d (%s) lacks virtual memory management or host mapping", ordinal, info.Name)
	}
	image := kernelsPTX
	if ptxHook != nil {
		image = ptxHook
	}
	mod, err := dev.LoadModule(image)
	if err != nil {
		return nil, fmt.Errorf("nvidia: loading gmig's kernels: %w", err)
	}
	g := &GPU{dev: dev, ops: cudaDevice{dev}, fill: 1024}
	for _, k := range []struct {
		f    *cuda.Function
		name string
	}{
		{&g.fn.copyPieces, "gmig_copy_pieces"},
		{&g.fn.fillPieces, "gmig_fill_pieces"},
		{&g.fn.saxpy, "gmig_saxpy"},
		{&g.fn.stencil, "gmig_stencil"},
		{&g.fn.render, "gmig_render"},
		{&g.fn.hashPages, "gmig_xxh64_pages"},
		{&g.fn.diffHashes, "gmig_diff_hashes"},
	} {
		if *k.f, err = dev.Function(mod, k.name); err != nil {
			_ = dev.UnloadModule(mod)
			return nil, fmt.Errorf("nvidia: %w", err)
		}
	}
	if grid, _, err := dev.Occupancy(g.fn.saxpy); err == nil && grid > 0 {
		g.fill = grid
	}
	gpus[ordinal] = g
	return g, nil
}

// Device is the GPU's CUDA device.
func (g *GPU) Device() *cuda.Device { return g.dev }

// Info describes the GPU.
func (g *GPU) Info() cuda.DeviceInfo {
	if g.dev == nil {
		return g.model
	}
	return g.dev.Info()
}

// Block sizes of the launches (threads per block; multiples of 32, as
// gmig_xxh64_pages needs).
const (
	blockThreads = 256
	pieceBlocks  = 8192 // most blocks a piece kernel launches (each loops)
)

// gridFor is the grid of a grid-stride kernel over n items: enough blocks
// for n, at most what fills the device a few times over.
func (g *GPU) gridFor(n uint64) uint32 {
	b := (n + blockThreads - 1) / blockThreads
	return uint32(max(1, min(b, uint64(g.fill)*2)))
}

// KernelsPTXEnv names the environment variable that points at a freshly
// built kernels.ptx to load instead of the embedded one.
const KernelsPTXEnv = "GMIG_CUDA_PTX"

// KernelsFromEnv makes GPUs opened from now on load the PTX in the file
// $GMIG_CUDA_PTX names, when it is set: for testing a freshly built
// kernels.ptx before it is committed (the cuda-tagged tests and
// gmig-nvbench call it first).
func KernelsFromEnv() error {
	p := os.Getenv(KernelsPTXEnv)
	if p == "" {
		return nil
	}
	image, err := os.ReadFile(p)
	if err != nil {
		return fmt.Errorf("nvidia: %s: %w", KernelsPTXEnv, err)
	}
	gpuMu.Lock()
	defer gpuMu.Unlock()
	ptxHook = image
	return nil
}
