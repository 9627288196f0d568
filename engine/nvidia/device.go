package nvidia

import "github.com/gmig-dev/gmig/internal/cuda"

// gpuDevice is what the NVIDIA back end and the GPU hasher use of a CUDA
// device: *cuda.Device through cudaDevice, or a software model of one in
// tests (model.go), which lets the back end's bookkeeping run and be
// checked under the race detector on machines without a GPU.
type gpuDevice interface {
	NewStream() (cuda.Stream, error)
	DestroyStream(cuda.Stream) error
	Sync(cuda.Stream) error
	HostRegister([]byte) (cuda.DevPtr, error)
	HostUnregister([]byte) error
	// NewMapping maps size bytes in a range of max(size, reserve) bytes
	// at addr when granted (0: anywhere).
	NewMapping(size, reserve uint64, addr cuda.DevPtr) (gpuMapping, error)
	AllocHostMapped(size uint64) ([]byte, cuda.DevPtr, error)
	FreeHost([]byte) error
	Alloc(size uint64) (cuda.DevPtr, error)
	Free(cuda.DevPtr) error
	CopyHtoD(dst cuda.DevPtr, src []byte, s cuda.Stream) error
	CopyDtoH(dst []byte, src cuda.DevPtr, s cuda.Stream) error
	Launch(f cuda.Function, grid, block uint32, s cuda.Stream, params ...uint64) error
	LaunchBuffer(f cuda.Function, grid, block [3]uint32, sharedBytes uint32, s cuda.Stream, params []byte) error
	LoadModule(image []byte) (cuda.Module, error)
	Function(m cuda.Module, name string) (cuda.Function, error)
	UnloadModule(cuda.Module) error
}

// gpuMapping is device memory placed with the virtual-memory API.
type gpuMapping interface {
	Addr() cuda.DevPtr
	Move(addr cuda.DevPtr) (bool, error)
	Close() error
}

// cudaDevice is a real device.
type cudaDevice struct{ *cuda.Device }

func (d cudaDevice) NewMapping(size, reserve uint64, addr cuda.DevPtr) (gpuMapping, error) {
	m, err := d.Device.NewMappingIn(size, reserve, addr)
	if err != nil {
		return nil, err
	}
	return m, nil
}
