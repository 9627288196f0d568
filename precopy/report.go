package precopy

import (
	"fmt"
	"strings"
	"time"

	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/internal/apilog"
)

// Report is what one migration did. The source's Stop and the
// destination's Receive each return one; the source's has its own
// measurements and the destination's restore and replay times (from the
// verdict), the destination's has its own and the source's (from the
// stream's summary Meta), so either side can log the whole picture.
type Report struct {
	Strategy Strategy
	// Tracking names how the source learned which pages the guest CPU
	// wrote: "uffd-wp (pid 1234, 1 mapping(s))", or "full hash (...)"
	// with why no write log was trusted.
	Tracking string
	Precopy  PrecopyReport
	Stop     StopReport
	// HashRate is the final scan's hash throughput in bytes/s (bytes it
	// hashed over its wall time; 0 when it hashed nothing, as stop-and-copy).
	HashRate float64
	// APILog compares what the source's API log recorded with what it sent.
	APILog apilog.Stats
	// GuestRAM is, on the destination, the guest RAM the source's device
	// wrote: the caller writes it into the VM's RAM (GuestRAM.WriteTo)
	// after the VMM has loaded the VM and before it runs. Never sent.
	GuestRAM *GuestRAM `json:"-"`
}

// PrecopyReport is the live phase, while the VM runs.
type PrecopyReport struct {
	Duration   time.Duration
	Rounds     int    // passes over memory: 1 for one-shot, 0 for stop-and-copy
	Pages      uint64 // page records sent, zero pages included
	ZeroPages  uint64 // of which all-zero (16-byte records, no data)
	Bytes      uint64 // stream bytes, framing included
	Background dirty.BackgroundStats
}

// StopReport is the stop phase, with the VM paused: the downtime. Total runs
// from the start of Stop to the destination's verdict; its parts are
// measured separately (Restore and Replay on the destination).
type StopReport struct {
	Total    time.Duration
	Quiesce  time.Duration // background re-hash stopped, engine quiesced
	Scan     time.Duration // final dirty detection
	Transfer time.Duration // dirty pages, device state, API log, End written
	Restore  time.Duration // destination: device state decoded and restored
	Replay   time.Duration // destination: API log and front-end writes replayed
	// LocalLoad is the part of Restore that copied the stop phase's
	// device-local pages (and the pre-copy's last ones) to the GPU, or
	// waited for their loader to finish (NVIDIA back end); 0 without.
	// LocalLoadEarly is the time the loader spent loading them before
	// (while the stop phase's streams arrived: outside the restore term),
	// LocalPagesEarly how many pages it loaded then.
	LocalLoad       time.Duration
	LocalLoadEarly  time.Duration
	LocalPagesEarly int

	DirtyPages int // pages sent at the stop
	LocalPages int // of which device-local (LocalMethod found them)
	// LocalMethod says how the device-local pages were found: "engine
	// marks" (software back end, exact, nothing hashed) or "gpu-hash"
	// and the local size (NVIDIA back end: local memory hashed on the
	// GPU); empty without local memory.
	LocalMethod string
	BySource    [dirty.NumSources]int // why each was dirty (stop-and-copy: all Unrecorded)
	PagesHashed int                   // pages the final scan hashed in full
	Bytes       uint64                // stream bytes sent in the stop phase, on every stream
	Streams     int                   // streams the stop phase's pages went on (shards.go)
	// GuestRAMPages is how many guest pages the device wrote during the
	// migration, sent at the stop for the destination to write into the
	// VM's RAM (the VMM's own migration does not see device writes).
	GuestRAMPages int
	// WriteLog is what the write log did for the final scan: whether it
	// was trusted, how many pages it had as written, why it was lost.
	WriteLog dirty.WriteLogStats
	// WriteLogVerified says VerifyWriteLog hashed every page the log
	// let the scan skip and found none changed.
	WriteLogVerified bool
}

// Other is the part of Total that none of the measured parts covers: the
// stream's tail in flight, the verdict's round trip, scheduling.
func (s StopReport) Other() time.Duration {
	return s.Total - s.Quiesce - s.Scan - s.Transfer - s.Restore - s.Replay
}

// String is a human-readable summary, times in milliseconds.
func (r Report) String() string {
	var b strings.Builder
	p, s := r.Precopy, r.Stop
	fmt.Fprintf(&b, "strategy   %s\n", r.Strategy)
	fmt.Fprintf(&b, "tracking   %s\n", r.TrackingLine())
	fmt.Fprintf(&b, "pre-copy   %s ms, %d round(s), %d pages (%d zero), %s",
		ms(p.Duration), p.Rounds, p.Pages, p.ZeroPages, mib(p.Bytes))
	if p.Background.Passes > 0 || p.Background.PagesHashed > 0 {
		fmt.Fprintf(&b, "; background re-hash %d pass(es), %d pages hashed, %d found dirty",
			p.Background.Passes, p.Background.PagesHashed, p.Background.FoundDirty)
	}
	fmt.Fprintf(&b, "\nstop       %s ms: quiesce %s, scan %s, transfer %s, restore %s, replay %s, other %s\n",
		ms(s.Total), ms(s.Quiesce), ms(s.Scan), ms(s.Transfer), ms(s.Restore), ms(s.Replay), ms(s.Other()))
	fmt.Fprintf(&b, "dirty      %d pages (%s; %d device-local), %d hashed, %s sent on %d stream(s); %d guest RAM page(s) the device wrote\n",
		s.DirtyPages, dirty.DescribeBySource(s.BySource), s.LocalPages, s.PagesHashed, mib(s.Bytes), max(1, s.Streams), s.GuestRAMPages)
	if s.LocalMethod != "" {
		fmt.Fprintf(&b, "local      %s, %d pages dirty\n", s.LocalMethod, s.LocalPages)
	}
	fmt.Fprintf(&b, "hash rate  %.2f GB/s\n", r.HashRate/1e9)
	a := r.APILog
	fmt.Fprintf(&b, "api log    %d entries (%d B) raw, %d entries (%d B) compacted\n",
		a.RawEntries, a.RawBytes, a.CompactedEntries, a.CompactedBytes)
	return b.String()
}

// TrackingLine is Tracking with what the write log did at the stop.
func (r Report) TrackingLine() string {
	w := r.Stop.WriteLog
	switch {
	case w.Lost != "":
		return fmt.Sprintf("%s; lost before the stop, every page hashed: %s", r.Tracking, w.Lost)
	case w.Active && r.Stop.WriteLogVerified:
		return fmt.Sprintf("%s; %d page(s) written at the stop, verified by the full hash", r.Tracking, w.Written)
	case w.Active:
		return fmt.Sprintf("%s; %d page(s) written at the stop", r.Tracking, w.Written)
	}
	return r.Tracking
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d)/float64(time.Millisecond)) }

func mib(n uint64) string { return fmt.Sprintf("%.2f MiB", float64(n)/(1<<20)) }
