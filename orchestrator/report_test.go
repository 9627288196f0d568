package orchestrator

import (
	"strings"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/precopy"
)

// TestTermsConsecutive: whatever the stop phase's own measurements say —
// the destination's restore overlapping the tail of the source's
// transfer, or outlasting the wait it happened in — the terms are never
// negative and add up to resumed − paused exactly.
func TestTermsConsecutive(t *testing.T) {
	ms := time.Millisecond
	t0 := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	src := sourceTimes{paused: t0, stopStart: t0.Add(2 * ms), stopEnd: t0.Add(40 * ms), switched: t0.Add(70 * ms)}
	dst := DestTimes{
		CommitReceived: t0.Add(71 * ms), Loaded: t0.Add(80 * ms), FrontEnd: t0.Add(95 * ms),
		Recorded: t0.Add(95 * ms), EngineRun: t0.Add(96 * ms), Resumed: t0.Add(97 * ms),
	}
	for name, st := range map[string]precopy.StopReport{
		"sequential":          {Quiesce: ms, Scan: 10 * ms, Transfer: 10 * ms, Restore: 5 * ms, Replay: ms},
		"restore overlaps":    {Quiesce: ms, Scan: 10 * ms, Transfer: 25 * ms, Restore: 5 * ms, Replay: ms},
		"restore outlasts":    {Quiesce: ms, Scan: 10 * ms, Transfer: 10 * ms, Restore: 30 * ms, Replay: 5 * ms},
		"transfer outlasts":   {Quiesce: ms, Scan: 10 * ms, Transfer: 40 * ms, Restore: 5 * ms, Replay: ms},
		"nothing at the stop": {},
	} {
		out, skew := terms(src, st, dst)
		var sum time.Duration
		for _, term := range out {
			if term.D < 0 {
				t.Errorf("%s: term %q is %v", name, term.Name, term.D)
			}
			sum += term.D
		}
		if want := 97 * ms; sum != want || skew {
			t.Errorf("%s: terms add up to %v (skew %v), want %v: %v", name, sum, skew, want, out)
		}
	}
	// Clocks that disagree show as a negative cross-host term, flagged.
	late := dst
	late.CommitReceived = src.switched.Add(-5 * ms)
	if _, skew := terms(src, precopy.StopReport{}, late); !skew {
		t.Error("a commit received before it was sent is not flagged")
	}
}

// TestTermsWithOverlap: with the switchover beside the stop phase and an
// early attach partly before the commit, the terms still add up to the
// downtime exactly, count only what lies after the overlapped work, and
// Beside holds the whole durations and their overlapped parts.
func TestTermsWithOverlap(t *testing.T) {
	ms := time.Millisecond
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	src := sourceTimes{
		paused: t0, stopStart: t0.Add(ms), stopEnd: t0.Add(60 * ms), switched: t0.Add(62 * ms),
		switchStart: t0.Add(2 * ms), switchEnd: t0.Add(61 * ms),
	}
	a := &attaching{
		early: true, start: t0.Add(59 * ms), loaded: t0.Add(62 * ms), frontEnd: t0.Add(68 * ms),
	}
	dst := DestTimes{CommitReceived: t0.Add(63 * ms)}
	dst.attached(a)
	dst.Recorded, dst.EngineRun, dst.Resumed = t0.Add(68*ms), t0.Add(69*ms), t0.Add(70*ms)
	out, skew := terms(src, precopy.StopReport{Quiesce: ms, Scan: 2 * ms, Transfer: 50 * ms, Restore: 5 * ms}, dst)
	var sum time.Duration
	got := map[string]time.Duration{}
	for _, term := range out {
		if term.D < 0 {
			t.Errorf("term %q is %v", term.Name, term.D)
		}
		sum += term.D
		got[term.Name] = term.D
	}
	if sum != 70*ms || skew {
		t.Errorf("terms add up to %v (skew %v), want 70ms: %v", sum, skew, out)
	}
	for name, want := range map[string]time.Duration{
		TermSwitchover: 2 * ms, // 60 → 62: the switchover's end beyond the stop phase, and the commit point
		TermLoad:       0,      // loaded before the commit came
		TermFrontEnd:   5 * ms, // 63 → 68
	} {
		if got[name] != want {
			t.Errorf("term %q %v, want %v", name, got[name], want)
		}
	}
	want := Beside{
		Switchover: 59 * ms, SwitchoverInStop: 58 * ms,
		Load: 3 * ms, LoadBeforeCommit: 3 * ms,
		FrontEnd: 6 * ms, FrontEndBeforeCommit: ms,
	}
	if b := beside(src, dst); b != want {
		t.Errorf("beside %+v, want %+v", b, want)
	}
	text := Report{Terms: out, Beside: want}.String()
	for _, line := range []string{
		"vmm switchover             59.00 ms (58.00 ms of it beside the vGPU stop phase)",
		"front-end restore           6.00 ms (1.00 ms of it before the commit arrived)",
	} {
		if !strings.Contains(text, line) {
			t.Errorf("the report does not say %q:\n%s", line, text)
		}
	}
}
