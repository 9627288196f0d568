package orchestrator

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// The phases that run beside the downtime's critical path: the source
// VMM's switchover beside the vGPU's stop phase, the destination's attach
// before the decision (switchover.go, attach.go).

// sumTerms checks that the report's terms are never negative and add up
// to its downtime exactly.
func sumTerms(t *testing.T, rep Report) {
	t.Helper()
	var sum time.Duration
	for _, term := range rep.Terms {
		if term.D < 0 {
			t.Errorf("term %q is %v", term.Name, term.D)
		}
		sum += term.D
	}
	if sum != rep.Downtime || rep.Downtime <= 0 {
		t.Errorf("terms add up to %v, the downtime is %v: %v", sum, rep.Downtime, rep.Terms)
	}
}

// The switchover starts after the quiesce and before the stop phase ends
// (the destination's verdict is held until it has started); the commit
// goes out only once both the verdict and the switchover are done.
func TestSwitchoverBesideStopPhase(t *testing.T) {
	e := newEnv(t, Timeouts{})
	quiesced, started, release := make(chan struct{}), make(chan struct{}), make(chan struct{})
	var verdictSent, switchedAtCommit, verdictAtCommit atomic.Bool
	e.vm.switchover = func(ctx context.Context) error {
		if !isClosed(quiesced) {
			t.Error("the switchover started before the vGPU's quiesce")
		}
		if verdictSent.Load() {
			t.Error("the switchover started after the destination's verdict")
		}
		close(started)
		// Held until the verdict is out, so that it ends after the stop
		// phase; the commit must still wait for it.
		return waitFor(ctx, release)
	}
	e.net.add(&fault{side: atDest, kind: kindData, act: actPass, first: func() {
		if err := waitFor(context.Background(), started); err != nil {
			t.Error(err)
		}
		verdictSent.Store(true)
	}})
	e.net.add(&fault{side: atSource, kind: kindMigrate, when: isCommit, act: actPass, first: func() {
		switchedAtCommit.Store(e.vm.n("Switchover", true) == 1)
		verdictAtCommit.Store(verdictSent.Load())
	}})
	e.start()
	s := e.source(Timeouts{})
	s.Precopy.Quiesced = func() { close(quiesced) }
	go func() {
		// The switchover ends once the stop phase has.
		if err := e.phases.wait(e.ctx, PhaseSwitchover); err == nil {
			close(release)
		}
	}()
	rep, err := e.migrate(t, s)
	if err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if !switchedAtCommit.Load() || !verdictAtCommit.Load() {
		t.Errorf("commit sent with the switchover done %v, the verdict sent %v; want both",
			switchedAtCommit.Load(), verdictAtCommit.Load())
	}
	checkLive(t, e, liveDest)
	sumTerms(t, rep)
	b := rep.Beside
	if b.Switchover <= 0 || b.SwitchoverInStop <= 0 || b.SwitchoverInStop > b.Switchover {
		t.Errorf("switchover %v, %v of it beside the stop phase: want a positive part of a positive whole", b.Switchover, b.SwitchoverInStop)
	}
	if got := rep.Term(TermSwitchover); got > b.Switchover {
		t.Errorf("term %q %v, over the whole switchover's %v", TermSwitchover, got, b.Switchover)
	}
}

// The stop phase fails (the destination's verdict never comes: its
// connection is cut) while the switchover is in flight: the switchover is
// cancelled and has returned before the source VM resumes, and the
// destination discards.
func TestStopFailsWithSwitchoverInFlight(t *testing.T) {
	e := newEnv(t, Timeouts{})
	started := make(chan struct{})
	e.vm.switchover = func(ctx context.Context) error {
		close(started)
		return waitFor(context.Background(), ctx.Done())
	}
	e.net.add(&fault{side: atDest, kind: kindData, act: actCut, first: func() {
		if err := waitFor(context.Background(), started); err != nil {
			t.Error(err)
		}
	}})
	e.start()
	_, err := e.migrate(t, e.source(Timeouts{}))
	checkErr(t, want{err: ErrRolledBack, text: "stop phase"}, err)
	sw, ok1 := e.vm.first("Switchover")
	res, ok2 := e.vm.first("Resume")
	switch {
	case !ok1 || !ok2:
		t.Fatalf("switchover called %v, resume called %v; want both", ok1, ok2)
	case res.start.Before(sw.end):
		t.Errorf("the source VM resumed at %v, before its switchover returned at %v", res.start, sw.end)
	}
	if a := e.waitArrival(t); a.Err == nil {
		t.Error("the destination says the VM arrived")
	}
	if got := checkCleanup(t, e, checkLive(t, e, liveSource)); got != cleanDiscarded {
		t.Errorf("cleanup %q, want %q", got, cleanDiscarded)
	}
}

// An early DestVM (QEMU) is attached before the decision: the commit is
// held until its front end is restored, which then lies entirely before
// the commit's arrival, and the terms count none of it. The simulator's
// kind is attached after the commit.
func TestAttachBeforeOrAfterCommit(t *testing.T) {
	for _, early := range []bool{true, false} {
		name := map[bool]string{true: "early", false: "after the commit"}[early]
		t.Run(name, func(t *testing.T) {
			var hold *fault
			if early {
				hold = &fault{side: atSource, kind: kindMigrate, when: isCommit, act: actPass}
			}
			e, rep, a := migrateHeldForFrontEnd(t, early, hold, "the commit")
			l := e.host().Landings()[0]
			fe, _ := l.vm.first("RestoreFrontEnd")
			wl, _ := l.vm.first("WaitLoaded")
			d := a.Times
			if early {
				if !fe.end.Before(d.CommitReceived) || !wl.start.Before(d.CommitReceived) {
					t.Errorf("load %v, front end done %v; the commit came %v: want both before it", wl.start, fe.end, d.CommitReceived)
				}
				if d.AttachStart.IsZero() || d.LoadDone.IsZero() || d.FrontEndDone.IsZero() {
					t.Errorf("an early attach's times missing: %+v", d)
				}
				if got := rep.Term(TermLoad) + rep.Term(TermFrontEnd); got != 0 {
					t.Errorf("the load and front-end terms are %v after an attach done before the commit", got)
				}
				if b := rep.Beside; b.FrontEnd != b.FrontEndBeforeCommit || b.Load != b.LoadBeforeCommit {
					t.Errorf("beside %+v: the whole attach came before the commit", b)
				}
				return
			}
			if wl.start.Before(d.CommitReceived) {
				t.Errorf("the simulator's kind was loaded at %v, before the commit at %v", wl.start, d.CommitReceived)
			}
			if !d.AttachStart.IsZero() || rep.Beside.LoadBeforeCommit != 0 || rep.Beside.FrontEndBeforeCommit != 0 {
				t.Errorf("an attach after the commit reported early: %+v, %+v", d, rep.Beside)
			}
		})
	}
}

// The source aborts after an early attach restored the destination's
// front end (its switchover fails once the stop phase is done): the
// destination discards, its VM never ran, and the source runs on.
func TestAbortAfterEarlyAttach(t *testing.T) {
	e := newEnv(t, Timeouts{})
	restored := make(chan struct{})
	e.host().breaks.early = true
	e.host().breaks.onRestored = func() { close(restored) }
	e.vm.switchover = func(ctx context.Context) error {
		if err := e.afterStop(ctx); err != nil {
			return err
		}
		if err := waitFor(ctx, restored); err != nil {
			return err
		}
		return errVMM
	}
	e.start()
	_, err := e.migrate(t, e.source(Timeouts{}))
	checkErr(t, want{err: ErrRolledBack, is: errVMM, text: "VMM switchover"}, err)
	if a := e.waitArrival(t); a.Err == nil {
		t.Error("the destination says the VM arrived")
	}
	if got := checkCleanup(t, e, checkLive(t, e, liveSource)); got != cleanDiscarded {
		t.Errorf("cleanup %q, want %q", got, cleanDiscarded)
	}
	l := e.host().Landings()[0]
	fe, _ := l.vm.first("RestoreFrontEnd")
	dc, _ := l.first("Discard")
	if fe.end.After(dc.start) || l.vm.n("Resume", false) != 0 {
		t.Errorf("front end restored until %v, discarded from %v, VM resumed %d times", fe.end, dc.start, l.vm.n("Resume", false))
	}
}

// An early attach that fails before the decision gives up: the source
// hears why and rolls back; the destination discards.
func TestEarlyAttachFailureGivesUp(t *testing.T) {
	e := newEnv(t, Timeouts{})
	e.host().breaks.early = true
	e.host().breaks.failRestore = errVMM
	e.vm.switchover = func(ctx context.Context) error {
		// Held: only the destination's word ends it.
		return waitFor(context.Background(), ctx.Done())
	}
	e.start()
	_, err := e.migrate(t, e.source(Timeouts{}))
	checkErr(t, want{err: ErrRolledBack, is: ErrDestinationGaveUp, text: "restoring the vGPU's PCI front end"}, err)
	if a := e.waitArrival(t); a.Err == nil {
		t.Error("the destination says the VM arrived")
	}
	if got := checkCleanup(t, e, checkLive(t, e, liveSource)); got != cleanDiscarded {
		t.Errorf("cleanup %q, want %q", got, cleanDiscarded)
	}
}

// With a source that sends the front end first in its stop phase, an
// early destination attaches while the pages still arrive: its verdict
// (the first thing it writes on the data connection) is held until the
// front end is restored, and the migration completes with the config
// writes the vGPU would have given.
func TestAttachBeforeVerdict(t *testing.T) {
	_, rep, a := migrateHeldForFrontEnd(t, true, &fault{side: atDest, kind: kindData, act: actPass}, "the verdict")
	if a.Times.ConfigWrites == 0 {
		t.Error("no config writes replayed")
	}
	if got := rep.Term(TermLoad) + rep.Term(TermFrontEnd); got != 0 {
		t.Errorf("the load and front-end terms are %v after an attach done before the verdict", got)
	}
}

// migrateHeldForFrontEnd migrates on a new env whose destination VMs
// attach early or not; hold, if set, is planned with a cue that waits
// until the destination's front end is restored (what it is held for, for
// the message), so the migration passes it only if that came first. It
// returns the env, the report and the arrival, the VM live at the
// destination and the terms summed.
func migrateHeldForFrontEnd(t *testing.T, early bool, hold *fault, what string) (*env, Report, Arrival) {
	t.Helper()
	e := newEnv(t, Timeouts{})
	restored := make(chan struct{})
	e.host().breaks.early = early
	e.host().breaks.onRestored = func() { close(restored) }
	if hold != nil {
		hold.first = func() {
			if err := waitFor(context.Background(), restored); err != nil {
				t.Errorf("the front end was not restored before %s: %v", what, err)
			}
		}
		e.net.add(hold)
	}
	e.start()
	rep, err := e.migrate(t, e.source(Timeouts{}))
	if err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	a := e.waitArrival(t)
	checkLive(t, e, liveDest)
	sumTerms(t, rep)
	return e, rep, a
}
