package orchestrator

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/internal/migtest"
)

// The fault matrix's checks of how a migration ended.

// errClass names Migrate's error by the sentinel callers branch on.
func errClass(err error) string {
	switch {
	case err == nil:
		return "nil (migrated)"
	case errors.Is(err, ErrRolledBack):
		return "ErrRolledBack"
	case errors.Is(err, ErrNotResumed):
		return "ErrNotResumed"
	case errors.Is(err, ErrOutcomeUnknown):
		return "ErrOutcomeUnknown"
	}
	return "unclassified: " + err.Error()
}

// checkErr checks Migrate's error against the cell's: its class, what
// it wraps, what it says.
func checkErr(t *testing.T, w want, err error) {
	t.Helper()
	switch {
	case w.err == nil && err != nil:
		t.Fatalf("Migrate: %v, want success", err)
	case w.err == nil:
		return
	case !errors.Is(err, w.err):
		t.Fatalf("Migrate: %v, want %v", err, w.err)
	case errors.Is(err, ErrRolledBack) && errors.Is(err, ErrOutcomeUnknown):
		t.Errorf("Migrate: %v is both rolled back and unknown", err)
	case errors.Is(err, ErrNotResumed) && (errors.Is(err, ErrRolledBack) || errors.Is(err, ErrOutcomeUnknown)):
		t.Errorf("Migrate: %v says the VM did not resume and something else", err)
	}
	if w.is != nil && !errors.Is(err, w.is) {
		t.Errorf("Migrate: %v does not wrap %v", err, w.is)
	}
	if !strings.Contains(err.Error(), w.text) {
		t.Errorf("Migrate: %q does not say %q", err, w.text)
	}
}

// sequence is the phases of a migration in order, before its end.
var sequence = []string{PhasePrepare, PhaseVGPULive, PhaseVMMLive, PhaseStop, PhaseSwitchover, PhaseCommit}

// checkPhases checks that Progress went through the sequence in order
// up to where the migration ended, and ended as it did.
func checkPhases(t *testing.T, e *env, rep Report, err error) {
	t.Helper()
	phases, ids := e.phases.get()
	if len(ids) != 1 || !ids[rep.ID] {
		t.Errorf("Progress named migrations %v, the report %q", ids, rep.ID)
	}
	last := phases[len(phases)-1]
	before := phases[:len(phases)-1]
	var want string
	switch {
	case err == nil:
		want = PhaseDone
	case errors.Is(err, ErrRolledBack), errors.Is(err, ErrNotResumed):
		want = PhaseRollback
	default: // unknown: still committing
		want, before = PhaseCommit, phases
	}
	if last != want || !slices.Equal(before, sequence[:min(len(before), len(sequence))]) ||
		(err == nil && len(before) != len(sequence)) {
		t.Errorf("phases %v", phases)
	}
}

// checkLive returns where the VM runs at the end, failing if it is not
// exactly one place, the one wanted, or if both sides ever ran it.
func checkLive(t *testing.T, e *env, want string) string {
	t.Helper()
	src := e.vm.State() == vmRunning
	dst, dstEver := false, false
	for _, l := range e.landings() {
		dst = dst || l.Live()
		dstEver = dstEver || l.vm.n("Resume", true) > 0
	}
	srcEver := src || e.vm.n("Resume", false) > 0 && e.vm.n("WaitPaused", true) > 0
	live := liveNone
	switch {
	case src && dst:
		live = "both"
	case src:
		live = liveSource
	case dst:
		live = liveDest
	}
	if live != want {
		t.Errorf("the VM runs at: %s, want %s (source VM %s)", live, want, e.vm.State())
	}
	if srcEver && dstEver {
		t.Error("both sides ran the VM after the pause")
	}
	return live
}

// checkCleanup checks that the side that lost the VM let go of it, and
// says how.
func checkCleanup(t *testing.T, e *env, live string) string {
	t.Helper()
	ls := e.landings()
	if live == liveDest {
		if n := e.vm.n("Release", false); n != 1 {
			t.Errorf("source VM released %d times", n)
		}
		if n := e.vm.n("Resume", false); n != 0 {
			t.Errorf("source VM resumed %d times", n)
		}
		if len(ls) != 1 || ls[0].n("Commit", false) != 1 || ls[0].n("Discard", false) != 0 {
			t.Fatalf("%d landings; want one committed once, never discarded", len(ls))
		}
		if !migtest.Quiesced(t, e.dev.V) {
			t.Error("the source vGPU runs after the VM left")
		}
		if d, ok := ls[0].vm.first("Resume"); ok {
			if s, _ := e.vm.first("Switchover"); d.start.Before(s.end) {
				t.Error("the destination resumed the VM before the source's switchover had completed")
			}
		}
		return cleanReleased
	}
	if n := e.vm.n("Resume", false); n == 0 {
		t.Error("source VM never resumed (nor tried to)")
	}
	if n := e.vm.n("Release", false); n != 0 {
		t.Errorf("source VM released %d times", n)
	}
	for _, l := range ls {
		if l.n("Discard", false) != 1 || l.n("Commit", false) != 0 {
			t.Errorf("a landing discarded %d, committed %d times; want discarded once",
				l.n("Discard", false), l.n("Commit", false))
		}
	}
	switch {
	case len(ls) > 0:
		return cleanDiscarded
	case e.host().Lands() > 0:
		return cleanNotLanded
	}
	return cleanUnreached
}

// checkMemory checks the vGPU memory where the VM runs, before anything
// runs on it again, and says what it equals: at the source, what it was
// before the migration; at the destination, the source's at the stop.
func checkMemory(t *testing.T, e *env, live string) string {
	t.Helper()
	switch live {
	case liveSource, liveNone:
		if !bytes.Equal(e.dev.V.Memory(), e.mem0) {
			t.Error("the source vGPU's memory changed")
			return "DIFFERS from before the migration"
		}
		return "equal to before the migration"
	case liveDest:
		if !bytes.Equal(e.landings()[0].v.Memory(), e.dev.V.Memory()) {
			t.Error("the destination vGPU's memory differs from the source's")
			return "DIFFERS from the source's"
		}
		return "destination's equal to the source's at the stop"
	}
	return "—"
}

// checkRuns checks that the vGPU where the VM runs runs: its engine takes
// commands. At the source, its memory is also what it was.
func checkRuns(t *testing.T, e *env, live string) {
	t.Helper()
	switch live {
	case liveSource, liveNone:
		// liveNone: the VM's VMM is gone, its vGPU runs on (a restarted
		// VMM, or the operator's stop, takes it from there).
		if !bytes.Equal(e.dev.V.Memory(), e.mem0) {
			t.Fatal("the source vGPU's memory changed")
		}
		if migtest.Quiesced(t, e.dev.V) {
			t.Fatal("the source vGPU is still quiesced")
		}
		e.dev.Submit(migtest.Fill(migtest.GFillAfter, 0x600d600d))
		if p := e.dev.Page(migtest.GFillAfter); p[0] != 0x0d || p[len(p)-1] != 0x60 {
			t.Errorf("FILL on the source did not run: % x", p[:4])
		}
	case liveDest:
		v := e.landings()[0].v
		if migtest.Quiesced(t, v) {
			t.Fatal("the destination vGPU is still quiesced")
		}
		e.dev.CheckRunsAfter(v)
	}
}

// checkSuccess checks a migration that completed with every answer: the
// downtime and its terms, the guest-observed gap, the vGPU's contents and
// the front end's config writes.
func checkSuccess(t *testing.T, e *env, rep Report) {
	t.Helper()
	l := e.landings()[0]
	l.vm.mu.Lock()
	resumed, frontEnd := l.vm.resumedAt, l.vm.frontEnd
	l.vm.mu.Unlock()
	if !rep.PausedAt.Equal(e.vm.PausedAt()) || !rep.ResumedAt.Equal(resumed) {
		t.Errorf("paused %v resumed %v; the VMs said %v and %v", rep.PausedAt, rep.ResumedAt, e.vm.PausedAt(), resumed)
	}
	if rep.Downtime <= 0 || rep.Downtime != rep.ResumedAt.Sub(rep.PausedAt) {
		t.Errorf("downtime %v from %v to %v", rep.Downtime, rep.PausedAt, rep.ResumedAt)
	}
	names := []string{TermPause, TermQuiesce, TermScan, TermTransfer, TermRestore, TermReplay, TermVerdict,
		TermSwitchover, TermCommit, TermLoad, TermFrontEnd, TermRecord, TermEngine, TermResume}
	var got []string
	var sum time.Duration
	for _, term := range rep.Terms {
		got = append(got, term.Name)
		sum += term.D
		if term.D < 0 {
			t.Errorf("term %q is negative: %v", term.Name, term.D)
		}
	}
	if !slices.Equal(got, names) {
		t.Errorf("terms %v, want %v", got, names)
	}
	if sum != rep.Downtime || rep.ClockSkewSuspect {
		t.Errorf("terms add up to %v, downtime %v (skew suspect %v)", sum, rep.Downtime, rep.ClockSkewSuspect)
	}
	// The fakes beat 1 ms before the pause and 1 ms after the resume.
	if !rep.GuestBeats || rep.GuestGap != rep.Downtime+2*time.Millisecond {
		t.Errorf("guest gap %v (beats %v), downtime %v", rep.GuestGap, rep.GuestBeats, rep.Downtime)
	}
	if rep.Precopy.Stop.DirtyPages == 0 {
		t.Error("no dirty pages at the stop after the guest wrote while live")
	}
	if !bytes.Equal(l.v.Memory(), e.dev.V.Memory()) {
		t.Error("the destination vGPU's memory differs from the source's")
	}
	if !reflect.DeepEqual(frontEnd, migtest.ConfigWrites) {
		t.Errorf("front end restored with %v, want %v", frontEnd, migtest.ConfigWrites)
	}
}
