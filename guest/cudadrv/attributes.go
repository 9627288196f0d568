package cudadrv

import "github.com/gmig-dev/gmig/abi"

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
	attrMaxSharedPerBlock      = 8
	attrTotalConstantMemory    = 9
	attrWarpSize               = 10
	attrMaxRegistersPerBlock   = 12
	attrMultiprocessorCount    = 16
	attrMaxThreadsPerSM        = 39
	attrUnifiedAddressing      = 41
	attrComputeCapabilityMajor = 75
	attrComputeCapabilityMinor = 76
	attrMaxSharedPerBlockOptin = 97
	attrMaxRegistersPerSM      = 82
	attrMaxSharedPerSM         = 81
	attrMaxBlocksPerSM         = 106
	// attributeMax is CU_DEVICE_ATTRIBUTE_MAX: numbers at or above it are
	// CUDA_ERROR_INVALID_VALUE.
	attributeMax = 134
)

// The execution model of a LAUNCH launch of a guest module
// (docs/device-abi.md §6.8): blocks of 256 threads, at most 2^31 threads
// in all.
const (
	blockThreads = 256
	maxGridX     = (1 << 31) / blockThreads
)

// The limits of a LAUNCH_GRID launch (abi13 contract; CUDA C Programming
// Guide, "Compute Capabilities": every GPU since compute capability 3.0):
// block dimensions 1024 × 1024 × 64 within 1024 threads, grid dimensions
// 2^31-1 × 65535 × 65535, 48 KiB of shared memory per block, 64 K 32-bit
// registers per block, 64 KiB of constant memory.
const (
	maxBlockDimXY   = 1024
	maxBlockDimZ    = 64
	maxGridDimX     = 1<<31 - 1
	maxGridDimYZ    = 65535
	maxRegisters    = 64 << 10
	constantMemory  = 64 << 10
	maxThreadsPerSM = 2048 // compute capability 5.2's (same table)
	maxBlocksPerSM  = 32   // compute capability 5.2's (same table)
	sharedPerSM     = 96 << 10
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

// attribute answers cuDeviceGetAttribute: as a GPU of compute capability
// 5.2 with one multiprocessor where the device runs LAUNCH_GRID (grid),
// else as the LAUNCH model of 256-thread blocks in one dimension.
func attribute(attr int32, grid bool) (int32, Result) {
	if grid {
		switch attr {
		case attrMaxThreadsPerBlock, attrMaxBlockDimX, attrMaxBlockDimY:
			return maxBlockDimXY, Success
		case attrMaxBlockDimZ:
			return maxBlockDimZ, Success
		case attrMaxGridDimX:
			return maxGridDimX, Success
		case attrMaxGridDimY, attrMaxGridDimZ:
			return maxGridDimYZ, Success
		case attrMaxSharedPerBlock, attrMaxSharedPerBlockOptin:
			return abi.LaunchGridMaxShared, Success
		case attrMaxSharedPerSM:
			return sharedPerSM, Success
		case attrTotalConstantMemory:
			return constantMemory, Success
		case attrMaxRegistersPerBlock, attrMaxRegistersPerSM:
			return maxRegisters, Success
		case attrMaxThreadsPerSM:
			return maxThreadsPerSM, Success
		case attrMaxBlocksPerSM:
			return maxBlocksPerSM, Success
		}
	}
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
