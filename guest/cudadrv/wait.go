package cudadrv

import (
	stdctx "context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/guest"
)

// Fences and the waits for them. Every register read is a round trip to
// gmigd (a trapped access in a guest, a vfio-user message from a host
// process: tens of microseconds), while a read of the aperture is a plain
// memory load. So where CAPS announces fences that write memory
// (abi.CapFenceMem, docs/device-abi.md §6.4) every fence of the library
// carries abi.FenceWriteMem and lands in the guest driver's fence slot, an
// aperture page; fences retire in order, so the slot only grows, and a
// wait polls it with no register access. ERR_STATUS is still read, but
// only once the spin is over and every errPollEvery polls after: a command
// that failed and took its fence with it (a dropped batch, §5) ends the
// wait that late at worst, with the error today's wait gives. Once the
// fence is seen, the verdict (guest.Driver.WaitRetired) is the one
// register read, ERR_STATUS, that reports a failed command. Without
// CAPS bit 1 the wait polls FENCE_DONE and ERR_STATUS, as it always did.

// Register polling (FENCE_DONE), paced as the guest driver paces its own:
// a few yields, then sleeps growing by 2 µs to 100 µs, which bounds an
// event's time stamp error while keeping a waiting thread off the trapped
// register (a choice, not a measurement). Go's runtime rounds sleeps of 10
// µs and more up to about a millisecond on Linux (its poller waits in
// milliseconds).
const (
	pollSpins       = 64
	pollSleepGrowth = 2 * time.Microsecond
	pollMaxSleep    = 100 * time.Microsecond
)

// Memory polling: the wait spins (yielding the goroutine) for memSpinTime,
// as CUDA's own default synchronisation spins while it has the cores,
// then sleeps as register polling does, reading ERR_STATUS at the first
// sleep and every errPollEvery sleeps after. A millisecond covers a
// staging chunk's move (a 1 MiB COPY at a few GB/s) and many launches with
// the CPU busy; a longer wait pays a ~1 ms sleep granularity (a choice;
// BenchmarkCopyHtoD and BenchmarkLaunch measure it).
const (
	memSpinTime  = time.Millisecond
	errPollEvery = 8
)

// fenceLocked issues a fence after everything submitted and returns its
// value. With memory fences it writes the fence slot.
func (l *Lib) fenceLocked() (uint64, Result) {
	var flags uint16
	if l.memFences {
		flags = abi.FenceWriteMem
	}
	v := l.d.Fence(flags)
	if err := l.d.Flush(); err != nil {
		return 0, l.fail(ErrUnknown, fmt.Errorf("cudadrv: issuing fence %d: %w", v, err))
	}
	if l.memFences {
		l.memFence = v
	}
	l.pending, l.batch.unrung = false, 0
	return v, Success
}

// syncLocked waits until everything submitted has retired.
func (l *Lib) syncLocked() Result {
	if !l.pending {
		// Nothing since the last fence: wait for that one (it may be an
		// event's, still queued).
		return l.waitFenceLocked(l.d.LastFence())
	}
	v, r := l.fenceLocked()
	if r != Success {
		return r
	}
	return l.waitFenceLocked(v)
}

// waitFenceLocked waits until fence v retired, stamping every recorded
// event whose fence it sees retire, then collects the device's verdict on
// the commands before it.
func (l *Lib) waitFenceLocked(v uint64) Result {
	if l.slotCovers(v) {
		return l.waitFenceMemLocked(v)
	}
	return l.waitFenceRegLocked(v)
}

// slotCovers reports whether fence v, once retired, shows in the fence
// slot: a memory fence at or after it was issued.
func (l *Lib) slotCovers(v uint64) bool { return l.memFences && v <= l.memFence }

// waitFenceMemLocked polls the fence slot until it reaches v (memory
// polling above).
func (l *Lib) waitFenceMemLocked(v uint64) Result {
	start := time.Now()
	for sleeps := 0; ; {
		done, ok, r := l.fenceSlotLocked()
		if r != Success {
			return r
		}
		if !ok {
			return l.waitFenceRegLocked(v)
		}
		if done >= v {
			return l.deviceResultLocked(l.d.WaitRetired(v))
		}
		if time.Since(start) < memSpinTime {
			runtime.Gosched()
			continue
		}
		if sleeps%errPollEvery == 0 {
			if st, err := l.d.Bus().ReadReg32(abi.RegErrStatus); err == nil && st != 0 {
				break // a command failed: Wait reports it (and a dropped fence)
			}
		}
		time.Sleep(min(time.Duration(sleeps)*pollSleepGrowth, pollMaxSleep)) // polling device memory
		sleeps++
	}
	return l.waitVerdictLocked(v)
}

// fenceSlotLocked reads the fence slot and stamps the events it shows retired.
// ok is false when the slot holds a value no fence of the library's had
// (something else wrote the aperture page): the caller then asks the
// registers instead.
func (l *Lib) fenceSlotLocked() (done uint64, ok bool, r Result) {
	done, err := l.d.FenceSlotValue()
	if err != nil {
		return 0, false, l.fail(ErrUnknown, fmt.Errorf("cudadrv: reading the fence slot: %w", err))
	}
	if done > l.d.LastFence() {
		l.cfg.Log.Warn().Uint64("slot", done).Uint64("last_fence", l.d.LastFence()).
			Msg("cudadrv: the fence slot holds a fence never issued; polling FENCE_DONE")
		return 0, false, Success
	}
	l.stampLocked(done)
	return done, true, Success
}

// waitFenceRegLocked polls FENCE_DONE until it reaches v (register polling
// above).
func (l *Lib) waitFenceRegLocked(v uint64) Result {
	for n := 0; ; n++ {
		done, err := l.d.FenceDone()
		if err != nil {
			return l.fail(ErrUnknown, err)
		}
		l.stampLocked(done)
		if done >= v {
			break
		}
		if st, err := l.d.Bus().ReadReg32(abi.RegErrStatus); err == nil && st != 0 {
			break // a command failed: Wait reports it (and a dropped fence)
		}
		if n < pollSpins {
			runtime.Gosched()
			continue
		}
		time.Sleep(min(time.Duration(n-pollSpins)*pollSleepGrowth, pollMaxSleep)) // polling a device register
	}
	return l.waitVerdictLocked(v)
}

// waitVerdictLocked waits for fence v with the guest driver, which tells a
// dropped fence from a late one, and maps its verdict. A dropped fence
// never retires, so the next synchronize must not wait for it again: it
// issues a fence of its own (the ring drained with the drop, so that one
// retires at once).
func (l *Lib) waitVerdictLocked(v uint64) Result {
	err := l.d.Wait(stdctx.Background(), v)
	if errors.Is(err, guest.ErrFenceLost) {
		l.pending = true
	}
	return l.deviceResultLocked(err)
}

// queryLocked answers whether fence v retired without waiting:
// CUDA_ERROR_NOT_READY until it has, then the device's verdict.
func (l *Lib) queryLocked(v uint64) Result {
	if l.slotCovers(v) {
		done, ok, r := l.fenceSlotLocked()
		if r != Success {
			return r
		}
		if ok {
			if done < v {
				return ErrNotReady
			}
			return l.deviceResultLocked(l.d.CheckErrors())
		}
	}
	done, err := l.d.FenceDone()
	if err != nil {
		return l.fail(ErrUnknown, err)
	}
	l.stampLocked(done)
	if done < v {
		return ErrNotReady
	}
	return l.deviceResultLocked(l.d.CheckErrors())
}

// stampLocked gives every recorded, unstamped event whose fence is at or
// below done the time now. Events are recorded with fences above every
// value seen retired, so only a done above the last one seen can stamp
// one.
func (l *Lib) stampLocked(done uint64) {
	if done <= l.seenDone {
		return
	}
	l.seenDone = done
	now := time.Now()
	for _, o := range l.objs {
		if e, ok := o.(*event); ok && e.recorded && !e.stamped && e.fence <= done {
			e.stamp, e.stamped = now, true
		}
	}
}
