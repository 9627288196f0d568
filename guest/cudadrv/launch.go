package cudadrv

import (
	"encoding/binary"
	"regexp"
	"strconv"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/engine/ptxparam"
)

// Functions and launches: a function's parameter layout, its attributes,
// cuLaunchKernel.

// CUfunction_attribute numbers (cuda.h, CUDA 12.4) answered with a value
// of the library's own; the others up to funcAttributeMax answer 0.
const (
	funcMaxThreadsPerBlock = 0
	funcPTXVersion         = 5
	funcBinaryVersion      = 6
	funcMaxDynamicShared   = 8
	funcAttributeMax       = 16
)

// rePTXVersion is a module's `.version major.minor` (PTX ISA, "PTX Module
// Directives").
var rePTXVersion = regexp.MustCompile(`\.version\s+(\d+)\.(\d+)`)

// FuncGetAttribute is cuFuncGetAttribute. The device compiles the PTX
// itself, so what a compiler decides (registers, static shared, local and
// constant memory) is not known here and answers 0; the limits are the
// device's (a LAUNCH function's blocks are the 256 threads of §6.8).
func (l *Lib) FuncGetAttribute(attr int32, f Handle) (int32, Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fn, ok := l.objs[f].(*function)
	if !ok {
		return 0, ErrInvalidHandle
	}
	switch attr {
	case funcMaxThreadsPerBlock:
		if fn.grid {
			return abi.LaunchGridMaxBlockThreads, Success
		}
		return blockThreads, Success
	case funcPTXVersion:
		v := rePTXVersion.FindSubmatch(fn.mod.ptx)
		if v == nil {
			return 0, Success
		}
		major, _ := strconv.Atoi(string(v[1])) // \d+ matched it
		minor, _ := strconv.Atoi(string(v[2]))
		return int32(major*10 + minor), Success
	case funcBinaryVersion:
		return ComputeMajor*10 + ComputeMinor, Success
	case funcMaxDynamicShared:
		if fn.grid {
			return abi.LaunchGridMaxShared, Success
		}
		return 0, Success
	}
	if attr < 0 || attr >= funcAttributeMax {
		return 0, ErrInvalidValue
	}
	return 0, Success
}

// FuncGetParamInfo is cuFuncGetParamInfo: parameter i's offset and size in
// the parameter buffer.
func (l *Lib) FuncGetParamInfo(f Handle, i uint64) (offset, size uint64, r Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fn, ok := l.objs[f].(*function)
	if !ok {
		return 0, 0, ErrInvalidHandle
	}
	if i >= uint64(len(fn.layout.Params)) {
		return 0, 0, ErrInvalidValue
	}
	p := fn.layout.Params[i]
	return uint64(p.Offset), uint64(p.Size), Success
}

// FuncLayout is f's parameter layout, for the C side to build
// cuLaunchKernel's parameter buffer from kernelParams.
func (l *Lib) FuncLayout(f Handle) (ptxparam.Layout, Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	fn, ok := l.objs[f].(*function)
	if !ok {
		return ptxparam.Layout{}, ErrInvalidHandle
	}
	return fn.layout, Success
}

// LaunchKernel is cuLaunchKernel: one launch written to the ring on the
// stream s names (its device stream id, stream.go), rung in a batch
// (batch.go), not waited for. params is the parameter buffer in
// f's layout. Where the device runs LAUNCH_GRID (CAPS bit 7) the buffer is
// placed where it lives until the launch ran (params.go) and grid, block
// and shared go to the device as they are, checked first as the device
// and CUDA check them. Elsewhere it is one LAUNCH: the parameters after
// the first (the graphics memory's address, the device's to give) as its
// arguments; the device runs ceil(param[1] / 256) blocks of 256 threads
// (§6.8), so grid and block are checked against that model, not used.
func (l *Lib) LaunchKernel(t Thread, f Handle, grid, block [3]uint32, shared uint32, s Handle, params []byte) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.streamOpLocked(t, s); r != Success {
		return r
	}
	fn, ok := l.objs[f].(*function)
	if !ok {
		return ErrInvalidHandle
	}
	if uint32(len(params)) != fn.layout.Size {
		return ErrInvalidValue
	}
	if !fn.grid {
		if block[0]*block[1]*block[2] > blockThreads || grid[0] == 0 || block[0] == 0 {
			return ErrInvalidValue
		}
		args := make([]uint64, 0, len(fn.layout.Params)-1)
		for _, p := range fn.layout.Params[1:] {
			var b [8]byte
			copy(b[:], params[p.Offset:p.Offset+p.Size])
			args = append(args, binary.LittleEndian.Uint64(b[:]))
		}
		return l.queueLocked(l.launchOnLocked(l.streamIDLocked(s), fn.kernel, args))
	}
	if r := checkGrid(grid, block, shared); r != Success {
		return r
	}
	ga, r := l.placeParamsLocked(params)
	if r != Success {
		return r
	}
	l.launchBuf = appendLaunchGrid(l.launchBuf[:0], l.streamIDLocked(s), fn.kernel, grid, block, shared, ga, uint32(len(params)))
	return l.queueLocked(l.d.Submit(l.launchBuf))
}

// launchOnLocked submits LAUNCH on device stream id; the driver's own
// commands go back to stream 0.
func (l *Lib) launchOnLocked(id uint8, kernel uint32, args []uint64) error {
	if err := l.d.SetStream(id); err != nil {
		return err
	}
	err := l.d.Launch(kernel, args...)
	if serr := l.d.SetStream(0); err == nil {
		err = serr
	}
	return err
}

// checkGrid refuses what LAUNCH_GRID refuses (abi13 contract, as
// cuLaunchKernel): a zero dimension, more than 1024 threads a block, a
// grid beyond 2^31-1 × 65535 × 65535, more than 48 KiB of dynamic shared
// memory.
func checkGrid(grid, block [3]uint32, shared uint32) Result {
	for _, v := range append(grid[:], block[:]...) {
		if v == 0 {
			return ErrInvalidValue
		}
	}
	if uint64(block[0])*uint64(block[1])*uint64(block[2]) > abi.LaunchGridMaxBlockThreads ||
		grid[0] > maxGridDimX || grid[1] > maxGridDimYZ || grid[2] > maxGridDimYZ || shared > abi.LaunchGridMaxShared {
		return ErrInvalidValue
	}
	return Success
}
