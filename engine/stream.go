package engine

import (
	"fmt"

	"github.com/gmig-dev/gmig/abi"
)

// Streams (docs/device-abi.md §5.1, ABI 1.2). The engine runs one ring in
// order, so every stream's commands run in the order they were submitted
// (and the streams' commands interleave in ring order: a correct, if
// strict, schedule for CUDA streams). What streams add is per-stream
// bookkeeping: the last fence each retired, and each one's first error as
// a CUDA-style code, after which its commands other than FENCE are skipped
// until the guest clears the error.

// streamReg is one stream's registers.
type streamReg struct {
	fence uint64 // value of the last FENCE retired on the stream
	err   uint32 // abi.Cuda* code of its first failure since cleared; 0 none
}

// StreamState is one stream's state as saved (only streams with a fence or
// an error are).
type StreamState struct {
	ID    uint32
	Fence uint64
	Err   uint32
}

// Stream returns stream id's error code (abi.Cuda*, 0 none) and the value
// of the last fence retired on it; both 0 for an id out of range or an
// engine without streams.
func (e *Engine) Stream(id uint32) (code uint32, fence uint64) {
	if !e.cfg.Streams || id >= abi.MaxStreams {
		return 0, 0
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.r.streams[id]
	return st.err, st.fence
}

// ClearStreamError clears stream id's error: its commands run again.
func (e *Engine) ClearStreamError(id uint32) {
	if !e.cfg.Streams || id >= abi.MaxStreams {
		return
	}
	e.mu.Lock()
	e.r.streams[id].err = 0
	e.mu.Unlock()
}

// takeStream strips the stream id from the header flags in hdr (the
// command's first 8 bytes, decoded afterwards) and returns it; without
// streams it leaves the bits for DecodeHeader to refuse as reserved.
func (e *Engine) takeStream(hdr []byte) uint32 {
	if !e.cfg.Streams {
		return 0
	}
	flags := le.Uint16(hdr[2:])
	le.PutUint16(hdr[2:], flags&^abi.CmdStreamMask)
	return uint32(flags) >> abi.CmdStreamShift
}

// streamFailed reports whether stream id has an error, so that its next
// command other than FENCE is skipped.
func (e *Engine) streamFailed(id uint32) bool {
	if !e.cfg.Streams {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.r.streams[id].err != 0
}

// noteStreamLocked records a command's outcome on its stream: the first
// failure's code (a dropped batch's framing error is no stream's) and a
// retired fence.
func (e *Engine) noteStreamLocked(res result) {
	if !e.cfg.Streams {
		return
	}
	st := &e.r.streams[res.stream]
	if res.code != 0 && !res.drop && st.err == 0 {
		st.err = res.cuda
		if st.err == 0 {
			st.err = cudaCode(res.op, res.code)
		}
	}
	if res.fenced {
		st.fence = res.fence
	}
}

// cudaCode is the CUDA-style code of a failed command (docs/device-abi.md
// §5.1): what the CUDA driver API returns for the same failure.
func cudaCode(op uint16, code uint32) uint32 {
	switch code {
	case abi.ErrPageFault:
		return abi.CudaErrorIllegalAddress
	case abi.ErrDMA, abi.ErrCommand:
		return abi.CudaErrorInvalidValue
	case abi.ErrKernel:
		switch op {
		case abi.OpKernelLoadModule:
			return abi.CudaErrorInvalidImage
		case abi.OpLaunch, abi.OpLaunchParams, abi.OpLaunchGrid:
			return abi.CudaErrorLaunchFailed
		}
		return abi.CudaErrorInvalidHandle
	}
	return abi.CudaErrorUnknown
}

// saveStreams lists the streams with a fence or an error.
func (r *regs) saveStreams() []StreamState {
	var out []StreamState
	for i, st := range r.streams {
		if st != (streamReg{}) {
			out = append(out, StreamState{ID: uint32(i), Fence: st.fence, Err: st.err})
		}
	}
	return out
}

// validateStreams checks saved streams: ids in range, each once.
func validateStreams(ss []StreamState) error {
	var seen [abi.MaxStreams]bool
	for _, st := range ss {
		if st.ID >= abi.MaxStreams || seen[st.ID] {
			return fmt.Errorf("%w: stream %d out of range or repeated", ErrBadState, st.ID)
		}
		seen[st.ID] = true
	}
	return nil
}
