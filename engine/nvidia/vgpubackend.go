package nvidia

import (
	"fmt"

	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/internal/cuda"
)

// VGPUBackend is a CUDA vGPU's back end as the vGPU, a migration, gmigd
// and gmig-nvbench use it: the engine's Backend plus device-local memory,
// the GPU's description and traffic counters. *NVIDIA implements it in
// this process (a vGPU of isolation "shared"); the GPU worker's client
// (engine/nvidia/gpuproc) implements it over a back end in a process of
// its own ("process", docs/nvidia.md "Isolation").
type VGPUBackend interface {
	engine.Backend
	// Close releases the back end (device memory, the window's page
	// lock; a worker process ends); it is unusable afterwards.
	Close() error
	// Info describes the GPU it runs on.
	Info() cuda.DeviceInfo
	// Stats returns its traffic counters.
	Stats() NVIDIAStats
	// MirrorBase is the device address of graphics-memory byte 0.
	MirrorBase() uint64
	// LocalSize is its device-local memory in bytes (0 for none).
	LocalSize() uint64
	// PlaceLocal moves device-local memory to device address addr (a
	// restore keeping the source's RegDeviceAddrBase); an address the
	// driver does not grant fails wrapping ErrDeviceAddr.
	PlaceLocal(addr uint64) error
	// NewLocalTracker returns a reader of device-local memory for a
	// migration (it must have some); close it when the migration ends.
	NewLocalTracker() (LocalReader, error)
	// LoadLocal copies the listed pages of mem, local memory's host image,
	// to device-local memory (a destination's, engine quiesced).
	LoadLocal(pages []int, mem []byte) error
	// PageHasher returns a GPU hasher of the host window (the aperture).
	PageHasher() (*GPUHasher, error)
	// ModelWrite writes b at device address addr of a model GPU as a guest
	// kernel would, behind the engine's back (tests); it fails on a GPU.
	ModelWrite(addr uint64, b []byte) error
}

// LocalReader reads a back end's device-local memory for a migration and
// finds the pages that changed since they were read (LocalTracker is the
// in-process one). One goroutine at a time, beside the engine's.
type LocalReader interface {
	// Pages is the number of device-local pages.
	Pages() int
	// Snapshot copies pages [first, first+n) into buf (4096 bytes each)
	// and records the hashes of exactly those bytes.
	Snapshot(first, n int, buf []byte) error
	// Changed returns, ascending, the pages whose hash differs from the
	// one Snapshot recorded and every page never snapshotted (engine
	// quiesced).
	Changed() ([]int, error)
	// ChangedIn is Changed over pages [first, first+n) alone (engine
	// quiesced).
	ChangedIn(first, n int) ([]int, error)
	// Read copies the listed pages, in order, into buf.
	Read(pages []int, buf []byte) error
	Close() error
}

// HashedReader is a LocalReader whose reads of changed pages can give
// each page's xxhash64 as its last Changed or ChangedIn computed it on the
// GPU (LocalTracker.ReadHashed), so that nobody hashes them again. ok
// false: buf is not where this reader reads with hashes, nothing was
// read.
type HashedReader interface {
	ReadHashed(pages []int, buf []byte, sums []uint64) (ok bool, err error)
}

var (
	_ VGPUBackend  = (*NVIDIA)(nil)
	_ HashedReader = (*LocalTracker)(nil)
)

// Info implements VGPUBackend: the GPU's description.
func (b *NVIDIA) Info() cuda.DeviceInfo { return b.g.Info() }

// ModelWrite implements VGPUBackend (GPU.ModelWrite), failing on a GPU.
func (b *NVIDIA) ModelWrite(addr uint64, p []byte) (err error) {
	if _, ok := b.g.ops.(*modelDevice); !ok {
		return fmt.Errorf("nvidia: ModelWrite on %s, a GPU, not the model", b.g.Info().Name)
	}
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("nvidia: ModelWrite at %#x: %v", addr, r)
		}
	}()
	b.g.ModelWrite(addr, p)
	return nil
}
