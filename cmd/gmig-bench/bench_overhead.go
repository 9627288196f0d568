package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/internal/guestwrites"
	"github.com/gmig-dev/gmig/internal/inproc"
	"github.com/gmig-dev/gmig/vgpu"
)

// overheadResult is the steady-state cost of dirty tracking: the
// workload's throughput (pages written per second, unpaced) in windows
// with tracking off and on — exact tracking of the engine's writes
// (vgpu.ObserveWrites → dirty.Tracker.MarkWritten) and the background
// re-hash at BackgroundRate pages/s — alternating in the same run.
type overheadResult struct {
	Workload       string    `json:"workload"`
	Mem            uint64    `json:"mem_bytes"`
	BackgroundRate int       `json:"background_rate_pages_per_s"`
	WindowMS       float64   `json:"window_ms"`
	OffMiBs        []float64 `json:"off_mibps"` // one per window, in order
	OnMiBs         []float64 `json:"on_mibps"`
	// Ratios are on/off for each pair of adjacent windows (ABBA order, so
	// a drift in the machine's load cancels).
	Ratios      []float64 `json:"ratios"`
	Median      float64   `json:"median_ratio"`
	OverheadPct float64   `json:"overhead_pct"` // (1 − Median) × 100
	BgHashed    int       `json:"background_pages_hashed"`
	Load1       float64   `json:"load1"`
	// WriteLog names the guest-write log that ran with the marks ("" for
	// none): armed at each "on" window's start and read at its end, as a
	// one-shot migration whose pre-copy lasts one window arms and reads it.
	WriteLog string `json:"write_log,omitempty"`
}

// overheadPairs is how many off/on pairs each measurement takes.
const overheadPairs = 20

// measureOverhead runs the overhead workload unpaced on one host and, in
// the same run, measures three kinds of tracking against none: the marks
// of the engine's writes alone (a one-shot migration without background
// re-hash, the default), the marks with the background re-hash at
// -overhead-background-rate, and the marks with the guest-write log.
func (c *benchConfig) measureOverhead(ctx context.Context) ([]overheadResult, error) {
	w := c.workload(c.overheadProfile)
	w.FPS = -1
	window := c.overhead / (3 * 2 * overheadPairs)
	c.statusf("== tracking overhead: %s on %s, %d windows of %v alternating off/on, three times (marks; marks + background re-hash at %d pages/s; marks + guest-write log)\n",
		w.Spec(), sizeString(c.overheadMem), 2*overheadPairs, window, c.overheadBgRate)
	p, err := inproc.New(c.overheadMem+(32<<20), c.log, nil)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	vm, _, err := p.StartVM(p.Hosts[0], vgpu.Config{Name: "overhead", MemSize: c.overheadMem}, 0, c.seed, w, nil)
	if err != nil {
		return nil, err
	}
	defer vm.Close()
	v, err := p.Hosts[0].VGPU("overhead")
	if err != nil {
		return nil, err
	}
	tr, err := dirty.New(v.Memory(), dirty.Options{Workers: c.workers})
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- vm.Run(ctx, 1<<40) }()
	if err := vm.WaitStep(ctx, 2); err != nil {
		return nil, err
	}
	if err := tr.RecordAll(ctx); err != nil {
		return nil, err
	}
	var out []overheadResult
	for _, variant := range []struct {
		bg  int
		log bool
	}{{0, false}, {c.overheadBgRate, false}, {0, true}} {
		bg := variant.bg
		res := overheadResult{Workload: w.Spec(), Mem: c.overheadMem, BackgroundRate: bg, WindowMS: ms(window), Load1: loadAvg()}
		measure := func(on bool) (float64, error) {
			var stop func() dirty.BackgroundStats
			if on {
				if err := v.ObserveWrites(tr.MarkWritten); err != nil {
					return 0, err
				}
				if bg > 0 {
					stop = tr.StartBackground(ctx, bg)
				}
				if variant.log {
					mode, end, err := armWriteLog(v, c.log)
					if err != nil {
						return 0, err
					}
					res.WriteLog = mode
					defer end()
				}
			}
			before := vm.Workload().Stats()
			select {
			case <-time.After(window):
			case err := <-done:
				return 0, fmt.Errorf("the workload ended: %v", err)
			}
			rate := statsSince(vm.Workload().Stats(), before).Rate()
			if on {
				_ = v.ObserveWrites(nil)
				if stop != nil {
					res.BgHashed += stop().PagesHashed
				}
			}
			return rate, nil
		}
		for i := range overheadPairs {
			order := []bool{false, true}
			if i%2 == 1 {
				order = []bool{true, false}
			}
			var off, on float64
			for _, tracking := range order {
				r, err := measure(tracking)
				if err != nil {
					return out, err
				}
				if tracking {
					on = r
					res.OnMiBs = append(res.OnMiBs, r)
				} else {
					off = r
					res.OffMiBs = append(res.OffMiBs, r)
				}
			}
			if off > 0 {
				res.Ratios = append(res.Ratios, on/off)
			}
		}
		res.Median = median(res.Ratios)
		res.OverheadPct = (1 - res.Median) * 100
		c.statusf("    background %d pages/s: off %.1f MiB/s, on %.1f MiB/s (medians), overhead %.2f %%\n",
			bg, median(res.OffMiBs), median(res.OnMiBs), res.OverheadPct)
		out = append(out, res)
	}
	cancel()
	<-done
	return out, nil
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func (o overheadResult) table() table {
	what := "engine-write marks"
	switch {
	case o.WriteLog != "":
		what = fmt.Sprintf("engine-write marks and the guest-write log (%s, armed per window)", o.WriteLog)
	case o.BackgroundRate > 0:
		what = fmt.Sprintf("engine-write marks and background re-hash at %d pages/s", o.BackgroundRate)
	}
	t := table{title: fmt.Sprintf("Steady-state cost of dirty tracking: %s on %s unpaced, %s on vs off, %d pairs of %.0f ms windows (ABBA); load %.1f",
		o.Workload, sizeString(o.Mem), what, len(o.Ratios), o.WindowMS, o.Load1),
		head: []string{"off MiB/s (median)", "on MiB/s (median)", "on/off per pair (median)", "min", "max", "overhead", "background pages hashed"}}
	lo, hi := slices.Min(append([]float64{1}, o.Ratios...)), slices.Max(append([]float64{1}, o.Ratios...))
	if len(o.Ratios) > 0 {
		lo, hi = slices.Min(o.Ratios), slices.Max(o.Ratios)
	}
	t.rows = [][]string{{f1(median(o.OffMiBs)), f1(median(o.OnMiBs)), f3(o.Median), f3(lo), f3(hi),
		fmt.Sprintf("%.2f %%", o.OverheadPct), fmt.Sprint(o.BgHashed)}}
	return t
}

// armWriteLog opens and arms the guest-write log a migration of v would
// use (this process's mappings: the simulated guest runs here); end reads
// it once, as a stop phase does, and closes it.
func armWriteLog(v *vgpu.VGPU, log zerolog.Logger) (mode string, end func(), err error) {
	ri, err := v.RegionInfo(abi.BARAperture)
	if err != nil {
		return "", nil, err
	}
	l, c := guestwrites.Open(0, ri.File, log)
	if l == nil {
		return "", nil, fmt.Errorf("no guest-write log: %s", c)
	}
	if err := l.Arm(); err != nil {
		l.Close()
		return "", nil, err
	}
	return c.Mode, func() {
		_, _ = l.Written(nil)
		l.Close()
	}, nil
}
