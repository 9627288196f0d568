package orchestrator

import (
	"context"
	"fmt"
	"time"

	"github.com/gmig-dev/gmig/internal/apilog"
	"github.com/gmig-dev/gmig/precopy"
)

// Attaching the arrived vGPU to the destination VM: the VMM finishes
// loading (DestVM.WaitLoaded), the guest RAM the source's device wrote
// goes over the loaded RAM, and the VMM's front end of the vGPU gets the
// guest's config writes back (DestVM.RestoreFrontEnd). None of it runs
// the VM, so for a VM whose Landing.Discard throws all of it away (QEMU:
// the destination QEMU is killed) it runs right after the verdict,
// beside the source's switchover and the commit's way here
// (EarlyAttacher); the durable "resumed" record, the engine's resume and
// the VM's stay after the commit. Otherwise it runs after the commit.
//
// For such a VM it starts sooner still where the source sends the guest
// RAM and the front end's writes first in its stop phase: as soon as they
// have arrived (precopy.Options.FrontEndArrived), while the pages still
// come, with those writes and that guest RAM — what the restored vGPU
// would give (its config writes are the FrontEnd section's). The VMM's
// config writes then reach the vGPU before its restore, which loads the
// source's config space over what they wrote: the same bytes (internal/pci
// keeps the space as plain data; the MSI eventfds QEMU sets up live in
// the vfio layer, untouched by a restore).

// EarlyAttacher is a DestVM that may be attached before the source's
// decision.
type EarlyAttacher interface {
	// AttachBeforeCommit reports whether WaitLoaded, the write of the
	// device-written guest RAM and RestoreFrontEnd may run before the
	// source's commit: an abort discards the landing and nothing of them
	// outlives it. A DestVM without the method is attached after the
	// commit (the simulator, whose RestoreFrontEnd moves the guest onto
	// the destination's vGPU: that cannot be undone).
	AttachBeforeCommit() bool
}

// attachErr is an attach's failure: what failed, and why.
type attachErr struct {
	what string
	err  error
}

func (e *attachErr) Error() string { return fmt.Sprintf("orchestrator: %s: %v", e.what, e.err) }
func (e *attachErr) Unwrap() error { return e.err }

// attaching is one attach on a goroutine of its own.
type attaching struct {
	early  bool // started before the decision
	cancel context.CancelFunc
	done   chan struct{}
	failed chan error // early only: the error, once, if it fails
	// given: the writes and the guest RAM came with the stream's front
	// end (attachOnFrontEnd), not from the restored vGPU.
	given bool
	ram   *precopy.GuestRAM
	// Set before done is closed (writes before start, where given).
	start, loaded, frontEnd time.Time
	writes                  []apilog.Entry
	err                     *attachErr
}

// attachEarly starts the attach now, before the decision, if the VM
// allows it (nil if not); ctx bounds it together with the decision
// timeout.
func (in *arriving) attachEarly(ctx context.Context) *attaching {
	if in.att != nil {
		return in.att // started when the front end arrived
	}
	if !in.attachableEarly() {
		return nil
	}
	return in.startEarly(ctx, nil)
}

// attachableEarly reports whether the VM may be attached before the
// decision.
func (in *arriving) attachableEarly() bool {
	e, ok := in.landing.VM().(EarlyAttacher)
	return ok && e.AttachBeforeCommit()
}

// attachOnFrontEnd is the receive's precopy.Options.FrontEndArrived for a
// VM attachable early (nil otherwise): it starts the attach with the
// stream's front end and guest RAM, bounded by ctx and the decision
// timeout, and sets in.att. It runs on the receive's goroutine.
func (in *arriving) attachOnFrontEnd(ctx context.Context) func([]apilog.Entry, *precopy.GuestRAM) {
	if !in.attachableEarly() {
		return nil
	}
	return func(writes []apilog.Entry, ram *precopy.GuestRAM) {
		if in.att == nil {
			in.att = in.startEarly(ctx, func(a *attaching) { a.given, a.writes, a.ram = true, writes, ram })
		}
	}
}

// startEarly starts an attach before the decision, bounded by ctx and the
// decision timeout; given, if set, fills in what came with the front end
// before it starts.
func (in *arriving) startEarly(ctx context.Context, given func(*attaching)) *attaching {
	ctx, cancel := context.WithTimeout(ctx, in.d.opts.Timeouts.Decision)
	a := newAttaching(cancel, time.Now(), true)
	if given != nil {
		given(a)
	}
	a.begin(ctx, in)
	return a
}

// attach starts the attach after the commit (received at start).
func (in *arriving) attach(ctx context.Context, start time.Time) *attaching {
	a := newAttaching(func() {}, start, false)
	a.begin(ctx, in)
	return a
}

// newAttaching is an attach not yet begun; cancel ends its context.
func newAttaching(cancel context.CancelFunc, start time.Time, early bool) *attaching {
	return &attaching{early: early, cancel: cancel, done: make(chan struct{}), failed: make(chan error, 1), start: start}
}

// begin runs the attach on a goroutine of its own.
func (a *attaching) begin(ctx context.Context, in *arriving) {
	go func() {
		defer close(a.done)
		defer a.cancel()
		if a.err = a.run(ctx, in); a.err != nil {
			a.failed <- a.err
		}
	}()
}

func (a *attaching) run(ctx context.Context, in *arriving) *attachErr {
	vm, v := in.landing.VM(), in.landing.VGPU()
	if err := vm.WaitLoaded(ctx); err != nil {
		return &attachErr{"the VMM did not load the VM", err}
	}
	a.loaded = time.Now()
	// The VMM's RAM is loaded: the guest RAM the source's engine wrote,
	// which the VMM's migration did not carry, goes over it (a VM without
	// a VMM migration shares the source's RAM: nothing to carry).
	ram := a.ram // given with the front end; else the received report's (Receive has returned)
	if !a.given {
		ram = in.rep.GuestRAM
	}
	if vm.Incoming() != "" {
		if err := ram.WriteTo(v); err != nil {
			return &attachErr{"writing the guest RAM the device wrote", err}
		}
	}
	if !a.given {
		a.writes = v.ConfigWrites()
	}
	if err := vm.RestoreFrontEnd(ctx, a.writes); err != nil {
		return &attachErr{"restoring the vGPU's PCI front end", err}
	}
	a.frontEnd = time.Now()
	return nil
}

// failures is what the decision's wait watches: an early attach's
// failure (nil channel: none to watch).
func (a *attaching) failures() <-chan error {
	if a == nil || !a.early {
		return nil
	}
	return a.failed
}

// wait returns the attach's failure once it has ended.
func (a *attaching) wait() *attachErr {
	<-a.done
	return a.err
}

// abandon ends an attach the migration no longer needs and waits for it,
// so that the discard finds nothing of it in flight.
func (a *attaching) abandon() {
	if a == nil {
		return
	}
	a.cancel()
	<-a.done
}

// attached sets the attach's times: with an early attach, Loaded and
// FrontEnd are the moments the commit found them done (never before
// CommitReceived: the parts of them on the downtime's critical path) and
// AttachStart, LoadDone and FrontEndDone the actual ones.
func (d *DestTimes) attached(a *attaching) {
	d.ConfigWrites = len(a.writes)
	if !a.early {
		d.Loaded, d.FrontEnd = a.loaded, a.frontEnd
		return
	}
	d.AttachStart, d.LoadDone, d.FrontEndDone = a.start, a.loaded, a.frontEnd
	d.Loaded = later(a.loaded, d.CommitReceived)
	d.FrontEnd = later(a.frontEnd, d.Loaded)
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
