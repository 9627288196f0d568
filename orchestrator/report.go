package orchestrator

import (
	"fmt"
	"strings"
	"time"

	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/precopy"
)

// Report is one migration as a user sees it.
type Report struct {
	ID       string           `json:"id"`
	VGPU     string           `json:"vgpu"`
	Strategy precopy.Strategy `json:"strategy"`

	// Downtime is the guest's pause to its resume on the host clocks: from
	// the moment the source VMM stopped the VM (PausedAt, source clock) to
	// the moment the destination VMM ran it again (ResumedAt, destination
	// clock). Terms divide it into consecutive parts that never overlap
	// and add up to it.
	Downtime  time.Duration `json:"downtime_ns"`
	PausedAt  time.Time     `json:"paused_at"`
	ResumedAt time.Time     `json:"resumed_at"`
	Terms     []Term        `json:"terms"`
	// ClockSkewSuspect is set when a term that spans both hosts' clocks
	// came out negative: the two clocks disagree, and Downtime and those
	// terms carry the skew.
	ClockSkewSuspect bool `json:"clock_skew_suspect,omitempty"`
	// Beside are the phases that run partly beside the downtime's
	// critical path, in full: the terms hold only their parts on it.
	Beside Beside `json:"beside"`

	// GuestGap is the guest-observed downtime: the host-clock gap between
	// the guest's last heartbeat on the source and its first on the
	// destination (zero, GuestBeats false, when the guest writes none).
	GuestGap   time.Duration `json:"guest_gap_ns"`
	GuestBeats bool          `json:"guest_beats"`

	// VMM is the VMM's own migration at the end; VMM.Downtime is its own
	// downtime figure (QEMU: stop to completion on the source).
	VMM VMMProgress `json:"vmm"`
	// VGPU is the vGPU's migration: pre-copy and stop phase in detail.
	Precopy precopy.Report `json:"precopy"`

	VGPULive     time.Duration `json:"vgpu_live_ns"` // the vGPU's live phase
	VMMLive      time.Duration `json:"vmm_live_ns"`  // the VMM's own migration before its pause
	Total        time.Duration `json:"total_ns"`     // the whole migration, first message to the end
	ConfigWrites int           `json:"config_writes"`
	// Estimate is the stop phase as estimated before the pause (only
	// with Source.MaxDowntime; estimate.go).
	Estimate *Estimate `json:"estimate,omitempty"`
}

// Beside are the full durations of the phases that run partly beside
// other work of the downtime (doc.go, "Downtime"): the VMM's switchover,
// which starts once the vGPU is quiesced, beside the rest of the stop
// phase, and the destination's attach, which a VM that allows it
// (EarlyAttacher) runs from the verdict on, before the commit arrives.
// Their terms ("vmm switchover", "vmm load", "front-end restore") count
// only what came after that other work; the parts here "beside" or
// "before the commit" were off the guest's downtime path.
type Beside struct {
	// Switchover is the VMM's switchover, start to completion (source
	// clock); SwitchoverInStop the part of it while the vGPU's stop phase
	// still ran.
	Switchover       time.Duration `json:"switchover_ns"`
	SwitchoverInStop time.Duration `json:"switchover_in_stop_ns"`
	// Load is the destination's wait for its VMM's load, from the
	// attach's start (its verdict with an early attach, else the commit);
	// FrontEnd the device-written guest RAM's write and the front end's
	// restore after it; the ...BeforeCommit parts ended before the commit
	// arrived (destination clock).
	Load                 time.Duration `json:"load_ns"`
	LoadBeforeCommit     time.Duration `json:"load_before_commit_ns"`
	FrontEnd             time.Duration `json:"front_end_ns"`
	FrontEndBeforeCommit time.Duration `json:"front_end_before_commit_ns"`
}

// beside computes Beside from both sides' times, each side's on its own
// clock.
func beside(s sourceTimes, d DestTimes) Beside {
	var b Beside
	if !s.switchStart.IsZero() && !s.switchEnd.IsZero() {
		b.Switchover = s.switchEnd.Sub(s.switchStart)
		b.SwitchoverInStop = max(earlier(s.switchEnd, s.stopEnd).Sub(s.switchStart), 0)
	}
	loaded, frontEnd := d.Loaded, d.FrontEnd
	start := d.CommitReceived
	if !d.AttachStart.IsZero() {
		start, loaded, frontEnd = d.AttachStart, d.LoadDone, d.FrontEndDone
		b.LoadBeforeCommit = max(earlier(loaded, d.CommitReceived).Sub(start), 0)
		b.FrontEndBeforeCommit = max(earlier(frontEnd, d.CommitReceived).Sub(earlier(loaded, d.CommitReceived)), 0)
	}
	b.Load = max(loaded.Sub(start), 0)
	b.FrontEnd = max(frontEnd.Sub(loaded), 0)
	return b
}

func earlier(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

// Term is one consecutive part of the downtime.
type Term struct {
	Name string        `json:"name"`
	D    time.Duration `json:"ns"`
}

// Term names, in the order they happen (docs/operator-guide.md explains
// each).
const (
	TermPause      = "vm pause"            // the VMM stopped the VM → the stop phase starts
	TermQuiesce    = "vgpu quiesce"        // the command in flight finishes
	TermScan       = "final dirty scan"    // hashes and marks → the pages to send
	TermTransfer   = "vgpu transfer"       // dirty pages, state and API log written
	TermRestore    = "vgpu restore"        // destination: state decoded and restored
	TermReplay     = "api log replay"      // destination: log replayed into the state
	TermVerdict    = "stream tail+verdict" // the stream's tail in flight, the verdict's way back
	TermSwitchover = "vmm switchover"      // the VMM's own remaining RAM and devices, the part beyond the stop phase
	TermCommit     = "commit"              // the commit's way to the destination
	TermLoad       = "vmm load"            // destination VMM finishes loading, the part after the commit arrived
	TermFrontEnd   = "front-end restore"   // device-written guest RAM written back, PCI config replayed into the VMM, the part after the commit arrived
	TermRecord     = "commit record"       // the rest of the durable commit record's write
	TermEngine     = "engine resume"       // the vGPU's engine is told to run
	TermResume     = "vm resume"           // the VMM runs the VM
)

// sourceTimes are the source's timestamps, on its clock.
type sourceTimes struct {
	paused, stopStart, stopEnd, switched time.Time
	// The VMM's switchover, which runs beside the stop phase.
	switchStart, switchEnd time.Time
}

// terms divides paused → resumed into consecutive parts from both sides'
// timestamps and the stop phase's own measurements.
func terms(s sourceTimes, st precopy.StopReport, d DestTimes) (out []Term, skew bool) {
	// Wall-clock readings only: the destination's came over the wire
	// without Go's monotonic reading, and differences must telescope.
	s.paused, s.stopStart, s.stopEnd, s.switched = s.paused.Round(0), s.stopStart.Round(0), s.stopEnd.Round(0), s.switched.Round(0)
	// The stop phase's own parts come one after the other on the source
	// (quiesce, scan, transfer), then its wait for the verdict, inside
	// which the destination restored and replayed. The destination may
	// start restoring a moment before the source's last write returns:
	// restore and replay are clipped to the wait, so no two terms ever
	// overlap and none is negative.
	stop := s.stopEnd.Sub(s.stopStart)
	transfer := min(st.Transfer, max(stop-st.Quiesce-st.Scan, 0))
	wait := max(stop-st.Quiesce-st.Scan-transfer, 0)
	restore := min(st.Restore, wait)
	replay := min(st.Replay, wait-restore)
	out = []Term{
		{TermPause, s.stopStart.Sub(s.paused)},
		{TermQuiesce, st.Quiesce},
		{TermScan, st.Scan},
		{TermTransfer, transfer},
		{TermRestore, restore},
		{TermReplay, replay},
		{TermVerdict, stop - st.Quiesce - st.Scan - transfer - restore - replay},
		{TermSwitchover, s.switched.Sub(s.stopEnd)},
		{TermCommit, d.CommitReceived.Sub(s.switched)},
		{TermLoad, d.Loaded.Sub(d.CommitReceived)},
		{TermFrontEnd, d.FrontEnd.Sub(d.Loaded)},
		{TermRecord, d.Recorded.Sub(d.FrontEnd)},
		{TermEngine, d.EngineRun.Sub(d.Recorded)},
		{TermResume, d.Resumed.Sub(d.EngineRun)},
	}
	for _, t := range out {
		if t.D < 0 {
			skew = true
		}
	}
	return out, skew
}

// Term returns the named term's duration (zero if absent).
func (r Report) Term(name string) time.Duration {
	for _, t := range r.Terms {
		if t.Name == name {
			return t.D
		}
	}
	return 0
}

// String is the human-readable report, times in milliseconds.
func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "migration %s of vGPU %s (%s)\n", r.ID, r.VGPU, r.Strategy)
	fmt.Fprintf(&b, "  downtime (pause -> resume, host clock)  %s ms\n", ms(r.Downtime))
	for _, t := range r.Terms {
		fmt.Fprintf(&b, "    %-22s %9s ms\n", t.Name, ms(t.D))
	}
	if r.ClockSkewSuspect {
		fmt.Fprintf(&b, "    (a term spanning both hosts is negative: their clocks disagree; the downtime carries the skew)\n")
	}
	if x := r.Beside; x.Switchover > 0 || x.Load > 0 || x.FrontEnd > 0 {
		fmt.Fprintf(&b, "  in full, beside the terms above:\n")
		fmt.Fprintf(&b, "    %-22s %9s ms (%s ms of it beside the vGPU stop phase)\n", TermSwitchover, ms(x.Switchover), ms(x.SwitchoverInStop))
		fmt.Fprintf(&b, "    %-22s %9s ms (%s ms of it before the commit arrived)\n", TermLoad, ms(x.Load), ms(x.LoadBeforeCommit))
		fmt.Fprintf(&b, "    %-22s %9s ms (%s ms of it before the commit arrived)\n", TermFrontEnd, ms(x.FrontEnd), ms(x.FrontEndBeforeCommit))
	}
	if r.GuestBeats {
		fmt.Fprintf(&b, "  guest-observed downtime (largest heartbeat gap)  %s ms\n", ms(r.GuestGap))
	} else {
		fmt.Fprintf(&b, "  guest-observed downtime: no guest heartbeats seen\n")
	}
	if r.VMM.Total > 0 {
		fmt.Fprintf(&b, "  VMM: RAM %s sent of %s; its own downtime figure %s ms (source stop to completion)\n",
			mib(r.VMM.Transferred), mib(r.VMM.Total), ms(r.VMM.Downtime))
	}
	p, s := r.Precopy.Precopy, r.Precopy.Stop
	fmt.Fprintf(&b, "  vGPU pre-copy %s ms (%d round(s)): %d pages (%d zero), %s\n",
		ms(p.Duration), p.Rounds, p.Pages, p.ZeroPages, mib(p.Bytes))
	fmt.Fprintf(&b, "  vGPU at the stop: %d dirty pages (%s), %d hashed, %s sent\n",
		s.DirtyPages, dirty.DescribeBySource(s.BySource), s.PagesHashed, mib(s.Bytes))
	fmt.Fprintf(&b, "  tracking: %s\n", r.Precopy.TrackingLine())
	a := r.Precopy.APILog
	fmt.Fprintf(&b, "  API log: %d entries (%d B) raw -> %d (%d B) compacted; %d config writes replayed\n",
		a.RawEntries, a.RawBytes, a.CompactedEntries, a.CompactedBytes, r.ConfigWrites)
	fmt.Fprintf(&b, "  phases: vGPU live %s ms, VMM live %s ms, whole migration %s ms\n",
		ms(r.VGPULive), ms(r.VMMLive), ms(r.Total))
	if e := r.Estimate; e != nil {
		fmt.Fprintf(&b, "  before the pause (%d extra round(s)): %s\n", e.Rounds, e)
	}
	return b.String()
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

func mib(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
