package orchestrator

import (
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
