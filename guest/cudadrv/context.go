package cudadrv

// context is a CUcontext. Every context runs on the one vGPU and its one
// ring; a context owns the allocations, streams, events and modules made
// while it was current, and destroying it releases them.
type context struct {
	h       Handle
	primary bool
	flags   uint32
}

// owned is what a context owns.
type owned interface{ owner() *context }

func (l *Lib) newHandleLocked(o any) Handle {
	h := l.next
	l.next++
	l.objs[h] = o
	return h
}

func (l *Lib) contextLocked(h Handle) (*context, Result) {
	c, ok := l.objs[h].(*context)
	if !ok {
		return nil, ErrInvalidContext
	}
	return c, Success
}

// currentLocked is t's current context, or CUDA_ERROR_INVALID_CONTEXT.
func (l *Lib) currentLocked(t Thread) (*context, Result) {
	if r := l.readyLocked(); r != Success {
		return nil, r
	}
	s := l.current[t]
	if len(s) == 0 {
		return nil, ErrInvalidContext
	}
	return s[len(s)-1], Success
}

// CtxCreate is cuCtxCreate_v2: a new context, pushed on t's stack.
func (l *Lib) CtxCreate(t Thread, flags uint32, dev Device) (Handle, Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.deviceLocked(dev); r != Success {
		return 0, r
	}
	c := &context{flags: flags}
	c.h = l.newHandleLocked(c)
	l.current[t] = append(l.current[t], c)
	return c.h, Success
}

// CtxDestroy is cuCtxDestroy_v2: it waits for the context's work, frees
// what it owns and takes it off every thread's stack.
func (l *Lib) CtxDestroy(h Handle) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.readyLocked(); r != Success {
		return r
	}
	c, r := l.contextLocked(h)
	if r != Success || c.primary {
		return ErrInvalidContext
	}
	return l.destroyLocked(c)
}

func (l *Lib) destroyLocked(c *context) Result {
	r := l.syncLocked()
	for h, o := range l.objs {
		if ow, ok := o.(owned); ok && ow.owner() == c {
			if m, ok := o.(*module); ok {
				l.unloadLocked(m)
			}
			if st, ok := o.(*stream); ok {
				l.releaseStreamIDLocked(st.id)
			}
			delete(l.objs, h)
		}
	}
	for p, a := range l.allocs {
		if a.ctx == c {
			if err := l.mem.Free(a.ga); err != nil {
				r = l.fail(ErrUnknown, err)
			}
			delete(l.allocs, p)
		}
	}
	delete(l.objs, c.h)
	for t, s := range l.current {
		kept := s[:0]
		for _, x := range s {
			if x != c {
				kept = append(kept, x)
			}
		}
		l.current[t] = kept
	}
	if l.primary == c {
		l.primary = nil
	}
	return r
}

// CtxPushCurrent is cuCtxPushCurrent_v2.
func (l *Lib) CtxPushCurrent(t Thread, h Handle) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.readyLocked(); r != Success {
		return r
	}
	c, r := l.contextLocked(h)
	if r != Success {
		return r
	}
	l.current[t] = append(l.current[t], c)
	return Success
}

// CtxPopCurrent is cuCtxPopCurrent_v2.
func (l *Lib) CtxPopCurrent(t Thread) (Handle, Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, r := l.currentLocked(t)
	if r != Success {
		return 0, r
	}
	s := l.current[t]
	l.current[t] = s[:len(s)-1]
	return c.h, Success
}

// CtxSetCurrent is cuCtxSetCurrent: it replaces the top of t's stack; 0
// pops it.
func (l *Lib) CtxSetCurrent(t Thread, h Handle) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.readyLocked(); r != Success {
		return r
	}
	s := l.current[t]
	if len(s) > 0 {
		s = s[:len(s)-1]
	}
	if h != 0 {
		c, r := l.contextLocked(h)
		if r != Success {
			return r
		}
		s = append(s, c)
	}
	l.current[t] = s
	return Success
}

// CtxGetCurrent is cuCtxGetCurrent: 0 when t has none.
func (l *Lib) CtxGetCurrent(t Thread) (Handle, Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, r := l.currentLocked(t)
	if r == ErrInvalidContext {
		return 0, Success
	}
	if r != Success {
		return 0, r
	}
	return c.h, Success
}

// CtxGetDevice is cuCtxGetDevice.
func (l *Lib) CtxGetDevice(t Thread) (Device, Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	_, r := l.currentLocked(t)
	return 0, r
}

// CtxSynchronize is cuCtxSynchronize: every command submitted so far has
// retired.
func (l *Lib) CtxSynchronize(t Thread) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, r := l.currentLocked(t); r != Success {
		return r
	}
	return l.syncLocked()
}

// DevicePrimaryCtxRetain is cuDevicePrimaryCtxRetain: the device's one
// primary context, made on first retain. It does not become current.
func (l *Lib) DevicePrimaryCtxRetain(dev Device) (Handle, Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.deviceLocked(dev); r != Success {
		return 0, r
	}
	if l.primary == nil {
		l.primary = &context{primary: true}
		l.primary.h = l.newHandleLocked(l.primary)
	}
	return l.primary.h, Success
}

// DevicePrimaryCtxRelease is cuDevicePrimaryCtxRelease_v2. The primary
// context stays until DevicePrimaryCtxReset, as it may still be current on
// another thread.
func (l *Lib) DevicePrimaryCtxRelease(dev Device) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.deviceLocked(dev); r != Success {
		return r
	}
	if l.primary == nil {
		return ErrInvalidContext
	}
	return Success
}

// DevicePrimaryCtxReset is cuDevicePrimaryCtxReset_v2: it destroys the
// primary context and what it owns.
func (l *Lib) DevicePrimaryCtxReset(dev Device) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.deviceLocked(dev); r != Success {
		return r
	}
	if l.primary == nil {
		return Success
	}
	return l.destroyLocked(l.primary)
}

// DevicePrimaryCtxGetState is cuDevicePrimaryCtxGetState.
func (l *Lib) DevicePrimaryCtxGetState(dev Device) (flags uint32, active bool, r Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.deviceLocked(dev); r != Success {
		return 0, false, r
	}
	if l.primary == nil {
		return 0, false, Success
	}
	return l.primary.flags, true, Success
}

// DevicePrimaryCtxSetFlags is cuDevicePrimaryCtxSetFlags_v2.
func (l *Lib) DevicePrimaryCtxSetFlags(dev Device, flags uint32) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.deviceLocked(dev); r != Success {
		return r
	}
	if l.primary != nil {
		l.primary.flags = flags
	}
	return Success
}
