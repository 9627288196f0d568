package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/precopy"
)

// ErrDowntime is wrapped in the rollback of a migration whose estimated
// stop phase stayed over its bound (Source.MaxDowntime) after the extra
// pre-copy rounds.
var ErrDowntime = errors.New("orchestrator: over the downtime bound")

// Estimate is the stop phase as a migration expects it before the pause:
//
//	DirtyPages = the last scan's dirty rate × (its interval + the time
//	             since), at most every page
//	Transfer   = DirtyPages × dirty.PageSize / Link
//	Total      = Scan + Transfer + VMM
//
// Link is the vGPU stream's rate measured over the live phase (so a
// bandwidth limit is in it); Scan is the last live scan's time (the final
// scan covers the same memory); VMM is the VMM's own expected stop (QEMU:
// its downtime-limit). The destination's restore, replay and the commit
// are not measured before the stop and are not in it.
type Estimate struct {
	DirtyPages int           `json:"dirty_pages"`
	DirtyRate  float64       `json:"dirty_rate"` // pages/s, the last scan's
	Link       float64       `json:"link"`       // bytes/s
	Scan       time.Duration `json:"scan_ns"`
	Transfer   time.Duration `json:"transfer_ns"`
	VMM        time.Duration `json:"vmm_ns"`
	Total      time.Duration `json:"total_ns"`
	Rounds     int           `json:"rounds"` // extra pre-copy rounds run to bring it down
}

// String is the estimate in one line, times in milliseconds.
func (e Estimate) String() string {
	return fmt.Sprintf("estimated stop phase %s ms: %d dirty pages (%.0f pages/s) at %.1f MiB/s: scan %s + transfer %s + VMM %s ms",
		ms(e.Total), e.DirtyPages, e.DirtyRate, e.Link/(1<<20), ms(e.Scan), ms(e.Transfer), ms(e.VMM))
}

// DowntimeExpecter is a SourceVM whose VMM says how long its own stop is
// meant to take (QEMU: downtime-limit).
type DowntimeExpecter interface {
	ExpectedDowntime() time.Duration
}

// maxConvergeRounds bounds the extra pre-copy rounds a migration runs to
// bring its estimate under its bound: as many as iterative's default
// rounds (precopy.DefaultMaxRounds).
const maxConvergeRounds = precopy.DefaultMaxRounds

// estimate computes the Estimate of a round's scan (since: the time since
// that scan), over pages pages at link bytes/s.
func estimate(r precopy.RoundResult, since time.Duration, pages int, link float64, vmm time.Duration) Estimate {
	e := Estimate{Link: link, Scan: r.Scan, VMM: vmm}
	if r.Interval > 0 {
		e.DirtyRate = float64(r.Dirty) / r.Interval.Seconds()
		e.DirtyPages = min(int(e.DirtyRate*(r.Interval+since).Seconds()+0.5), pages)
	} else {
		e.DirtyPages = min(r.Dirty, pages)
	}
	if link > 0 {
		e.Transfer = time.Duration(float64(e.DirtyPages) * dirty.PageSize / link * float64(time.Second))
	}
	e.Total = e.Scan + e.Transfer + e.VMM
	return e
}

// converge runs, for a migration with a downtime bound, extra pre-copy
// rounds after the vGPU's live phase until the estimated stop phase fits
// the bound, at most maxConvergeRounds; past them it fails with
// ErrDowntime and the estimate, and the migration rolls back. link is
// the live phase's measured rate (0: nothing was sent live; the first
// round's rate stands in).
func (m *outgoing) converge(ctx context.Context, link float64) error {
	if m.MaxDowntime <= 0 {
		return nil
	}
	var vmm time.Duration
	if de, ok := m.VM.(DowntimeExpecter); ok {
		vmm = de.ExpectedDowntime()
	}
	for i := 1; ; i++ {
		r, err := m.src.Round(ctx)
		if err != nil {
			return err
		}
		if link <= 0 && r.Send > 0 {
			link = float64(r.Bytes) / r.Send.Seconds() // nothing sent live: the round's own rate
		}
		e := estimate(r, r.Send, m.src.Pages(), link, vmm)
		e.Rounds = i
		m.Control.setEstimate(e)
		m.rep.Estimate = &e
		m.log.Info().Int("round", i).Int("dirty_pages", e.DirtyPages).Dur("estimate", e.Total).
			Dur("max_downtime", m.MaxDowntime).Msg("stop phase estimated")
		if e.Total <= m.MaxDowntime {
			return nil
		}
		if i >= maxConvergeRounds {
			return fmt.Errorf("%w: estimated downtime %d ms exceeds --max-downtime %d ms after %d extra pre-copy rounds (%s)",
				ErrDowntime, e.Total.Milliseconds(), m.MaxDowntime.Milliseconds(), i, e)
		}
	}
}
