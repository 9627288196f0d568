package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/precopy"
)

// benchFile is everything one gmig-bench run measured: results.json.
type benchFile struct {
	Command  string           `json:"command"`
	Started  time.Time        `json:"started"`
	Finished time.Time        `json:"finished"`
	Machine  benchMachine     `json:"machine"`
	Results  []benchResult    `json:"results"`
	Overhead []overheadResult `json:"tracking_overhead,omitempty"`
}

// benchMachine describes where it ran.
type benchMachine struct {
	Cores      int     `json:"cores"`
	GOMAXPROCS int     `json:"gomaxprocs"`
	Workers    int     `json:"hash_workers"`
	Go         string  `json:"go"`
	Load1      float64 `json:"load1_start"`
	Load1End   float64 `json:"load1_end"`
}

func describeMachine(workers int) benchMachine {
	return benchMachine{Cores: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), Workers: workers,
		Go: runtime.Version(), Load1: loadAvg()}
}

// benchResult is one migration of one case with one variant.
type benchResult struct {
	Case     benchCase        `json:"case"`
	Variant  string           `json:"variant"` // the strategy, "-serial" for the serial stop phase
	Strategy precopy.Strategy `json:"strategy"`
	Run      int              `json:"run"`
	Timeline benchTimeline    `json:"timeline"`
	// FullHash: run without the log of the guest's writes (the stop
	// phase hashed every page).
	FullHash bool `json:"full_hash,omitempty"`
	// BurstPages is the pages the dirty profile's guest wrote after the
	// pre-copy.
	BurstPages int `json:"burst_pages,omitempty"`

	DowntimeMS  float64  `json:"downtime_ms"`  // pause → resume, host clock
	GuestGapMS  float64  `json:"guest_gap_ms"` // largest guest heartbeat gap
	Terms       []termMS `json:"terms"`        // the downtime's consecutive terms
	StopPhaseMS float64  `json:"stop_phase_ms"`

	Limit         limitEstimate `json:"limit"` // the stop phase's physical limit
	LimitMS       float64       `json:"limit_ms"`
	StopVsLimit   float64       `json:"stop_vs_limit"`     // stop phase / limit
	DowntimeLimit float64       `json:"downtime_vs_limit"` // downtime / limit

	PrecopyMS     float64        `json:"precopy_ms"`
	PrecopyRounds int            `json:"precopy_rounds"`
	PrecopyPages  uint64         `json:"precopy_pages"`
	PrecopyBytes  uint64         `json:"precopy_bytes"`
	StopPages     int            `json:"stop_pages"` // pages sent in the downtime
	StopBytes     uint64         `json:"stop_bytes"` // stream bytes sent in the downtime
	StopBySource  map[string]int `json:"stop_by_source"`
	PagesHashed   int            `json:"stop_pages_hashed"`
	ScanMSPerGiB  float64        `json:"scan_ms_per_gib"` // final scan per GiB of vGPU memory
	TotalBytes    uint64         `json:"total_bytes"`     // pre-copy + stop
	UsedBytes     uint64         `json:"used_bytes"`      // the vGPU's pages holding data
	VGPULiveMS    float64        `json:"vgpu_live_ms"`
	VMMLiveMS     float64        `json:"vmm_live_ms"`
	MigrationMS   float64        `json:"migration_ms"`

	RateAsked    float64 `json:"dirty_rate_asked_mibps"`    // the profile's rate, MiB/s of guest time
	RateAchieved float64 `json:"dirty_rate_achieved_mibps"` // what the workload wrote from the migration's start to the pause point
	// HeldEarlyMS is how long the workload waited at the pause point
	// before the live phase ended (it stopped writing early; raise -hold).
	HeldEarlyMS float64 `json:"held_early_ms,omitempty"`
	DigestOK    bool    `json:"digest_ok"`

	Rates  machineRates        `json:"rates"`
	Report orchestrator.Report `json:"report"`
}

type termMS struct {
	Name string  `json:"name"`
	MS   float64 `json:"ms"`
}

// setReport takes the orchestrator's report.
func (r *benchResult) setReport(rep orchestrator.Report) { r.Report = rep }

// finish derives the result's figures from its report and rates.
func (r *benchResult) finish() {
	rep := r.Report
	p, s := rep.Precopy.Precopy, rep.Precopy.Stop
	r.DowntimeMS, r.GuestGapMS = ms(rep.Downtime), ms(rep.GuestGap)
	r.Terms = r.Terms[:0]
	for _, t := range rep.Terms {
		r.Terms = append(r.Terms, termMS{t.Name, ms(t.D)})
	}
	r.StopPhaseMS = ms(s.Total)
	r.PrecopyMS, r.PrecopyRounds, r.PrecopyPages, r.PrecopyBytes = ms(p.Duration), p.Rounds, p.Pages, p.Bytes
	r.StopPages, r.StopBytes, r.PagesHashed = s.DirtyPages, s.Bytes, s.PagesHashed
	r.StopBySource = map[string]int{}
	for src, n := range s.BySource {
		if n > 0 {
			r.StopBySource[dirty.Source(src).String()] = n
		}
	}
	if r.Case.Mem > 0 {
		r.ScanMSPerGiB = ms(s.Scan) / (float64(r.Case.Mem) / (1 << 30))
	}
	r.TotalBytes = p.Bytes + s.Bytes
	r.VGPULiveMS, r.VMMLiveMS, r.MigrationMS = ms(rep.VGPULive), ms(rep.VMMLive), ms(rep.Total)
	r.Limit = estimateLimit(r.Rates, s.PagesHashed, s.Bytes, s.Streams)
	r.LimitMS = ms(r.Limit.Total())
	if r.LimitMS > 0 {
		r.StopVsLimit, r.DowntimeLimit = r.StopPhaseMS/r.LimitMS, r.DowntimeMS/r.LimitMS
	}
}

// term returns the named term in ms.
func (r benchResult) term(name string) float64 {
	for _, t := range r.Terms {
		if t.Name == name {
			return t.MS
		}
	}
	return 0
}

// summary is the result in one progress line.
func (r benchResult) summary() string {
	s := fmt.Sprintf("pre-copy %.0f ms (%.1f MiB); downtime %.2f ms (scan %.2f + transfer %.2f), guest gap %.2f ms; stop phase %.2f ms = %.2fx its limit %.2f ms; %d pages (%.1f MiB) in the downtime; dirty rate %.1f of %.1f MiB/s",
		r.PrecopyMS, mibs(r.PrecopyBytes), r.DowntimeMS, r.term(orchestrator.TermScan), r.term(orchestrator.TermTransfer), r.GuestGapMS, r.StopPhaseMS, r.StopVsLimit, r.LimitMS,
		r.StopPages, mibs(r.StopBytes), r.RateAchieved, r.RateAsked)
	if st := r.Report.Precopy.Stop; st.Transfer > 0 {
		// The vGPU stream's rate against the loopback limit of its
		// streams.
		s += fmt.Sprintf("; stop phase on %d stream(s): %.2f GB/s against %.2f GB/s loopback",
			max(1, st.Streams), float64(st.Bytes)/(st.Scan+st.Transfer).Seconds()/1e9, r.Rates.estimateLinkGBps(st.Streams))
	}
	if r.HeldEarlyMS > 0 {
		s += fmt.Sprintf("; HELD %.0f ms before the live phase ended", r.HeldEarlyMS)
	}
	if r.DigestOK {
		s += "; digest ok"
	}
	return s
}

// save writes results.json (and results.md) into the output directory,
// after every case, so an interrupted run keeps what it measured.
func (c *benchConfig) save(f *benchFile) error {
	if c.outDir == "" {
		return nil
	}
	if err := os.MkdirAll(c.outDir, 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.outDir, "results.json"), append(b, '\n'), 0o644); err != nil {
		return err
	}
	md, err := os.Create(filepath.Join(c.outDir, "results.md"))
	if err != nil {
		return err
	}
	writeMarkdown(md, f)
	return md.Close()
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mibs(n uint64) float64 { return float64(n) / (1 << 20) }

// commandLine is the command as results.json and results.md record it:
// "gmig-bench" and its arguments, with every absolute path (an argument,
// or a flag's value after "=") relative to the working directory, so that
// a record committed with the results names no machine's directories.
func commandLine(args []string) string {
	out := []string{"gmig-bench"}
	wd, err := os.Getwd()
	for _, a := range args[min(1, len(args)):] {
		name, val, isFlag := strings.Cut(a, "=")
		if !isFlag {
			name, val = "", a
		}
		if err == nil && filepath.IsAbs(val) {
			if rel, rerr := filepath.Rel(wd, val); rerr == nil {
				val = rel
			}
		}
		if val == "" {
			val = `""` // an empty argument, as a shell would take it
		}
		if isFlag {
			val = name + "=" + val
		}
		out = append(out, val)
	}
	return strings.Join(out, " ")
}
