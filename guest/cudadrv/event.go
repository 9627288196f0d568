package cudadrv

// EventCreate is cuEventCreate.
func (l *Lib) EventCreate(t Thread, flags uint32) (Handle, Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, r := l.currentLocked(t)
	if r != Success {
		return 0, r
	}
	if flags&^eventFlagsKnown != 0 || (flags&eventInterprocess != 0 && flags&eventDisableTiming == 0) {
		return 0, ErrInvalidValue
	}
	return l.newHandleLocked(&event{ctx: c, flags: flags}), Success
}

// EventDestroy is cuEventDestroy_v2.
func (l *Lib) EventDestroy(e Handle) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.readyLocked(); r != Success {
		return r
	}
	if _, ok := l.objs[e].(*event); !ok {
		return ErrInvalidHandle
	}
	delete(l.objs, e)
	return Success
}

// EventRecord is cuEventRecord: a FENCE after everything submitted so far.
func (l *Lib) EventRecord(t Thread, e Handle, s Handle) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.streamOpLocked(t, s); r != Success {
		return r
	}
	ev, ok := l.objs[e].(*event)
	if !ok {
		return ErrInvalidHandle
	}
	v, r := l.fenceLocked()
	if r != Success {
		return r
	}
	ev.fence, ev.recorded, ev.stamped = v, true, false
	return Success
}

// EventQuery is cuEventQuery: CUDA_ERROR_NOT_READY until the event's
// fence retired; an event never recorded has completed.
func (l *Lib) EventQuery(e Handle) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	ev, r := l.eventLocked(e)
	if r != Success || !ev.recorded {
		return r
	}
	return l.queryLocked(ev.fence)
}

// EventSynchronize is cuEventSynchronize.
func (l *Lib) EventSynchronize(e Handle) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	ev, r := l.eventLocked(e)
	if r != Success || !ev.recorded {
		return r
	}
	return l.waitFenceLocked(ev.fence)
}

func (l *Lib) eventLocked(e Handle) (*event, Result) {
	if r := l.readyLocked(); r != Success {
		return nil, r
	}
	ev, ok := l.objs[e].(*event)
	if !ok {
		return nil, ErrInvalidHandle
	}
	return ev, Success
}

// EventElapsedTime is cuEventElapsedTime: milliseconds from start's
// completion to end's, by the host clock (stream.go). Both must have been
// recorded and completed, with timing.
func (l *Lib) EventElapsedTime(start, end Handle) (float32, Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	a, r := l.eventLocked(start)
	if r != Success {
		return 0, r
	}
	b, r := l.eventLocked(end)
	if r != Success {
		return 0, r
	}
	if (a.flags|b.flags)&eventDisableTiming != 0 || !a.recorded || !b.recorded {
		return 0, ErrInvalidHandle
	}
	for _, ev := range []*event{a, b} {
		if r := l.queryLocked(ev.fence); r != Success {
			return 0, r
		}
	}
	return float32(b.stamp.Sub(a.stamp).Seconds() * 1e3), Success
}
