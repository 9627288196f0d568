package cudadrv

import (
	"errors"
	"fmt"
	"time"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/guest"
)

// Streams and events. Every stream's commands go to the one ring, in
// order. On a device with streams (docs/device-abi.md §5.1) each stream
// the program creates gets a device stream id (1..255, the least used
// one: more than 255 streams share ids, and so share an error state), and
// its launches carry it, so a faulting kernel stops its own stream's
// later commands, not the default stream's; copies, memsets and the
// library's fences stay on stream 0 (the ring's order covers them). An event is a
// FENCE: recorded, it is the fence's value; it has completed once the
// fence retired. Its time is the host clock when the library first saw
// the fence retired, polling (wait.go; the device stamps no times on
// fences), so cuEventElapsedTime is as fine as that polling: microseconds
// while a thread waits on the device.

// cuStream/cuEvent creation flags and the special stream handles (cuda.h,
// CUDA 12.4).
const (
	streamNonBlocking    = 0x1 // CU_STREAM_NON_BLOCKING
	streamFlagsSupported = streamNonBlocking
	streamLegacy         = 1   // CU_STREAM_LEGACY
	streamPerThread      = 2   // CU_STREAM_PER_THREAD
	eventBlockingSync    = 0x1 // CU_EVENT_BLOCKING_SYNC
	eventDisableTiming   = 0x2 // CU_EVENT_DISABLE_TIMING
	eventInterprocess    = 0x4 // CU_EVENT_INTERPROCESS
	eventFlagsKnown      = eventBlockingSync | eventDisableTiming | eventInterprocess
	eventWaitExternal    = 0x1 // CU_EVENT_WAIT_EXTERNAL, cuStreamWaitEvent's one flag
)

type stream struct {
	ctx   *context
	flags uint32
	id    uint8 // device stream id (§5.1); 0 on a device without streams
}

func (s *stream) owner() *context { return s.ctx }

type event struct {
	ctx      *context
	flags    uint32
	fence    uint64 // 0: never recorded
	stamp    time.Time
	stamped  bool
	recorded bool
}

func (e *event) owner() *context { return e.ctx }

// streamOpLocked checks that t has a current context and s names a stream
// (0, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD are the default stream).
func (l *Lib) streamOpLocked(t Thread, s Handle) Result {
	if _, r := l.currentLocked(t); r != Success {
		return r
	}
	if s == 0 || s == streamLegacy || s == streamPerThread {
		return Success
	}
	if _, ok := l.objs[s].(*stream); !ok {
		return ErrInvalidHandle
	}
	return Success
}

// submitLocked rings the doorbell for a submitted command, so the device
// starts on it without the caller waiting, or reports its submission
// error.
func (l *Lib) submitLocked(err error) Result {
	if err == nil {
		err = l.d.Flush()
	}
	if err != nil {
		return l.fail(ErrUnknown, fmt.Errorf("cudadrv: submitting a command: %w", err))
	}
	l.pending, l.batch.unrung = true, 0
	return Success
}

// deviceResultLocked maps what a wait reports to a CUresult. On a device
// with streams (docs/device-abi.md §5.1) that is the code the device gave
// stream 0, or else the first of the program's streams' (a launch runs on
// its own), and every stream's error is then cleared: a stream with an
// error skips its commands until then, and CUDA reports a call's error
// once. Elsewhere a page fault is CUDA_ERROR_ILLEGAL_ADDRESS, a kernel
// error CUDA_ERROR_LAUNCH_FAILED, anything else the device refused
// CUDA_ERROR_INVALID_VALUE.
func (l *Lib) deviceResultLocked(err error) Result {
	if err == nil {
		return Success
	}
	var de *guest.DeviceError
	if errors.As(err, &de) && l.d.Streams() {
		var first uint32
		for id := range abi.MaxStreams {
			if id != 0 && l.streamUsers[id] == 0 {
				continue
			}
			code, _, serr := l.d.StreamStatus(uint8(id))
			if serr != nil || code == abi.CudaSuccess {
				continue
			}
			if cerr := l.d.ClearStreamError(uint8(id)); cerr != nil {
				return l.fail(ErrUnknown, cerr)
			}
			if first == 0 {
				first = code
			}
		}
		if first != 0 {
			return l.fail(Result(first), err)
		}
	}
	switch {
	case errors.As(err, &de) && de.Has(abi.ErrPageFault):
		return l.fail(ErrIllegalAddress, err)
	case errors.As(err, &de) && de.Has(abi.ErrKernel):
		return l.fail(ErrLaunchFailed, err)
	case errors.As(err, &de):
		return l.fail(ErrInvalidValue, err)
	}
	return l.fail(ErrUnknown, err)
}

// StreamCreate is cuStreamCreate.
func (l *Lib) StreamCreate(t Thread, flags uint32) (Handle, Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, r := l.currentLocked(t)
	if r != Success {
		return 0, r
	}
	if flags&^streamFlagsSupported != 0 {
		return 0, ErrInvalidValue
	}
	return l.newHandleLocked(&stream{ctx: c, flags: flags, id: l.takeStreamIDLocked()}), Success
}

// takeStreamIDLocked picks a new stream's device id: the least used of
// 1..MaxStreams-1, 0 on a device without streams.
func (l *Lib) takeStreamIDLocked() uint8 {
	if l.d == nil || !l.d.Streams() {
		return 0
	}
	best := 1
	for id := 2; id < abi.MaxStreams; id++ {
		if l.streamUsers[id] < l.streamUsers[best] {
			best = id
		}
	}
	l.streamUsers[best]++
	return uint8(best)
}

// releaseStreamIDLocked gives back a destroyed stream's device id.
func (l *Lib) releaseStreamIDLocked(id uint8) {
	if id != 0 {
		l.streamUsers[id]--
	}
}

// streamIDLocked is the device stream id of s (checked by
// streamOpLocked): 0 for the default stream.
func (l *Lib) streamIDLocked(s Handle) uint8 {
	if st, ok := l.objs[s].(*stream); ok {
		return st.id
	}
	return 0
}

// StreamDestroy is cuStreamDestroy_v2. Work already queued on it still
// runs.
func (l *Lib) StreamDestroy(s Handle) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.readyLocked(); r != Success {
		return r
	}
	st, ok := l.objs[s].(*stream)
	if !ok {
		return ErrInvalidHandle
	}
	l.releaseStreamIDLocked(st.id)
	delete(l.objs, s)
	return Success
}

// StreamSynchronize is cuStreamSynchronize.
func (l *Lib) StreamSynchronize(t Thread, s Handle) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.streamOpLocked(t, s); r != Success {
		return r
	}
	return l.syncLocked()
}

// StreamQuery is cuStreamQuery: CUDA_ERROR_NOT_READY while work submitted
// before it is queued.
func (l *Lib) StreamQuery(t Thread, s Handle) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.streamOpLocked(t, s); r != Success {
		return r
	}
	v := l.d.LastFence()
	if l.pending {
		var r Result
		if v, r = l.fenceLocked(); r != Success {
			return r
		}
	}
	return l.queryLocked(v)
}

// StreamWaitEvent is cuStreamWaitEvent: the ring already orders every
// command after the event's fence, so it only checks its arguments.
func (l *Lib) StreamWaitEvent(t Thread, s, e Handle, flags uint32) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.streamOpLocked(t, s); r != Success {
		return r
	}
	if _, ok := l.objs[e].(*event); !ok {
		return ErrInvalidHandle
	}
	if flags&^eventWaitExternal != 0 {
		return ErrInvalidValue
	}
	return Success
}

// StreamCheck answers what a call on stream s would: Success when t has a
// current context and s names a stream (the host copies' Async forms).
func (l *Lib) StreamCheck(t Thread, s Handle) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.streamOpLocked(t, s)
}
