package cudadrv

import (
	"fmt"
	"time"
)

// Doorbell batching. A doorbell is a trapped register write (a VM exit and
// a message to gmigd), far dearer than writing a launch into the ring, so
// launches are written to the ring without one (queueLocked) and rung in
// batches: when launchBatch of them wait, at every call that waits for the
// device or needs the ring's order seen by it (a fence: synchronize,
// query, event record, host copies, module loads, frees, memsets and
// device copies, which ring at once), and at the latest RingDelay after
// the first unrung launch, rung by a timer — so a program that launches
// and then sleeps, or spins on something other than this library, sees its
// kernel run. Nothing waits on an unrung launch except through a call that
// rings first, so batching cannot deadlock.

// DefaultRingDelay is Config.RingDelay's default: a launch waits at most
// this long unrung. It is of the order of a doorbell's own cost under a VM
// (tens of microseconds), so a burst of launches rings about once per
// delay, and small against a kernel a program waits for (a choice).
const DefaultRingDelay = 100 * time.Microsecond

// launchBatch launches wait for at most one doorbell: enough that the
// doorbell's cost is a small share of each (a choice; BenchmarkLaunch
// measures it).
const launchBatch = 64

type batch struct {
	unrung int         // commands in the ring since the last doorbell
	timer  *time.Timer // rings them RingDelay after the first
	armed  bool
}

// queueLocked accounts for a launch written to the ring (or reports its
// submission error) without ringing the doorbell for it.
func (l *Lib) queueLocked(err error) Result {
	if err != nil {
		return l.fail(ErrUnknown, fmt.Errorf("cudadrv: submitting a launch: %w", err))
	}
	l.pending = true
	l.batch.unrung++
	if l.batch.unrung >= launchBatch {
		return l.ringLocked()
	}
	if !l.batch.armed {
		delay := l.cfg.RingDelay
		if delay == 0 {
			delay = DefaultRingDelay
		}
		if l.batch.timer == nil {
			l.batch.timer = time.AfterFunc(delay, l.ringLate)
		} else {
			l.batch.timer.Reset(delay)
		}
		l.batch.armed = true
	}
	return Success
}

// ringLocked rings the doorbell for everything in the ring.
func (l *Lib) ringLocked() Result {
	l.batch.unrung = 0
	if err := l.d.Flush(); err != nil {
		return l.fail(ErrUnknown, fmt.Errorf("cudadrv: ringing the doorbell: %w", err))
	}
	return Success
}

// ringLate is the timer's: it rings launches that waited RingDelay.
func (l *Lib) ringLate() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.batch.armed = false
	if l.batch.unrung > 0 {
		l.ringLocked()
	}
}
