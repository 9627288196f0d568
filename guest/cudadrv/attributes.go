package cudadrv

// CUdevice_attribute numbers (cuda.h, CUDA 12.4, enum CUdevice_attribute)
// the library answers with a value of its own; every other attribute up to
// attributeMax answers 0 (the device does not have the feature).
const (
	attrMaxThreadsPerBlock     = 1
	attrMaxBlockDimX           = 2
	attrMaxBlockDimY           = 3
	attrMaxBlockDimZ           = 4
	attrMaxGridDimX            = 5
	attrMaxGridDimY            = 6
	attrMaxGridDimZ            = 7
	attrWarpSize               = 10
	attrMultiprocessorCount    = 16
	attrUnifiedAddressing      = 41
	attrComputeCapabilityMajor = 75
	attrComputeCapabilityMinor = 76
	// attributeMax is CU_DEVICE_ATTRIBUTE_MAX: numbers at or above it are
	// CUDA_ERROR_INVALID_VALUE.
	attributeMax = 134
)

// The execution model of a guest module launch (docs/device-abi.md §6.8):
// blocks of 256 threads, at most 2^31 threads in all.
const (
	blockThreads = 256
	maxGridX     = (1 << 31) / blockThreads
)

// ComputeCapability is what the vGPU reports: the PTX target guest modules
// are written for (docs/cuda.md: PTX for compute_52 JIT-compiles on every
// GPU the CUDA back end runs on).
const (
	ComputeMajor = 5
	ComputeMinor = 2
)

// warpSize is the warp of every NVIDIA GPU (CUDA C Programming Guide, "SIMT
// Architecture").
const warpSize = 32

func attribute(attr int32) (int32, Result) {
	switch attr {
	case attrMaxThreadsPerBlock, attrMaxBlockDimX:
		return blockThreads, Success
	case attrMaxBlockDimY, attrMaxBlockDimZ, attrMaxGridDimY, attrMaxGridDimZ, attrMultiprocessorCount:
		return 1, Success
	case attrMaxGridDimX:
		return maxGridX, Success
	case attrWarpSize:
		return warpSize, Success
	case attrUnifiedAddressing:
		return 0, Success
	case attrComputeCapabilityMajor:
		return ComputeMajor, Success
	case attrComputeCapabilityMinor:
		return ComputeMinor, Success
	}
	if attr <= 0 || attr >= attributeMax {
		return 0, ErrInvalidValue
	}
	return 0, Success
}
