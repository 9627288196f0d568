package main

import (
	"fmt"
	"image/color"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
)

// writePlots draws the run's PNGs into dir: downtime against vGPU memory
// (the memory sweep: one plot per workload and mode, a line per variant,
// the write log's and the full hash's apart), against the dirty rate (the rate sweep), pages in
// the downtime per strategy (the profile comparison) and the downtime
// split into its terms (the profile comparison's first case, and its
// real-VM twin).
func writePlots(dir string, f *benchFile) error {
	order, m := means(f.Results)
	plots := []struct {
		name string
		fn   func([]groupKey, map[groupKey]benchResult) (*plot.Plot, error)
	}{
		{"downtime-vs-rate.png", plotVsRate},
		{"pages-in-downtime.png", plotStopPages},
		{"downtime-terms.png", plotTerms},
	}
	for _, pl := range plots {
		p, err := pl.fn(order, m)
		if err != nil {
			return fmt.Errorf("plot %s: %w", pl.name, err)
		}
		if p == nil {
			continue
		}
		if err := p.Save(8*vg.Inch, 5*vg.Inch, filepath.Join(dir, pl.name)); err != nil {
			return fmt.Errorf("plot %s: %w", pl.name, err)
		}
	}
	mps, err := memoryPlots(order, m)
	if err != nil {
		return err
	}
	for name, p := range mps {
		if err := p.Save(8*vg.Inch, 5*vg.Inch, filepath.Join(dir, name)); err != nil {
			return fmt.Errorf("plot %s: %w", name, err)
		}
	}
	return nil
}

// memorySwept reports whether r is on a downtime-vs-size line: the
// in-process memory sweep, or a real-VM case.
func memorySwept(r benchResult) bool { return inSweep(r, "memory") || r.Case.Mode == "qemu" }

// memoryPlots draws downtime against vGPU memory, one plot per mode and
// workload of the memory sweep: downtime-vs-memory.png where there is one,
// else downtime-vs-memory-MODE-WORKLOAD.png each.
func memoryPlots(order []groupKey, m map[groupKey]benchResult) (map[string]*plot.Plot, error) {
	type line struct{ mode, workload string }
	var lines []line
	for _, k := range order {
		r := m[k]
		if l := (line{r.Case.Mode, r.Case.Workload}); memorySwept(r) && !slices.Contains(lines, l) {
			lines = append(lines, l)
		}
	}
	out := map[string]*plot.Plot{}
	for _, l := range lines {
		on := func(r benchResult) bool {
			return memorySwept(r) && r.Case.Mode == l.mode && r.Case.Workload == l.workload
		}
		sizes := map[uint64]bool{}
		for _, k := range order {
			if r := m[k]; on(r) {
				sizes[r.Case.Mem] = true
			}
		}
		if len(sizes) < 2 {
			continue // one size is no line (and a log axis of one value has no range)
		}
		p, err := plotVsMemory(order, m, on)
		if err != nil {
			return nil, fmt.Errorf("plot downtime vs memory, %s %s: %w", l.mode, l.workload, err)
		}
		if p == nil {
			continue
		}
		name := "downtime-vs-memory.png"
		if len(lines) > 1 {
			name = "downtime-vs-memory-" + fileSlug(l.mode+"-"+l.workload) + ".png"
		}
		out[name] = p
	}
	return out, nil
}

// fileSlug keeps letters, digits, dots and dashes of s; the rest become
// dashes.
func fileSlug(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '-' {
			return r
		}
		return '-'
	}, s)
}

// inSweep reports whether r is an in-process result of sweep.
func inSweep(r benchResult, sweep string) bool {
	return r.Case.Mode == "inproc" && slices.Contains(strings.Split(r.Case.Sweep, "+"), sweep)
}

// variantsOf lists the variants among keys, in order.
func variantsOf(keys []groupKey) []string {
	var out []string
	for _, k := range keys {
		if !slices.Contains(out, k.variant) {
			out = append(out, k.variant)
		}
	}
	return out
}

// lines draws one line (with points) per variant of the results that
// pass keep, at x(result), y = downtime.
func lines(title, xlabel string, order []groupKey, m map[groupKey]benchResult,
	keep func(benchResult) bool, x func(benchResult) float64) (*plot.Plot, error) {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text = xlabel
	p.Y.Label.Text = "downtime, pause → resume (ms)"
	p.Legend.Top = true
	any := false
	for i, v := range variantsOf(order) {
		var xys plotter.XYs
		for _, k := range order {
			r := m[k]
			if k.variant == v && keep(r) {
				xys = append(xys, plotter.XY{X: x(r), Y: r.DowntimeMS})
			}
		}
		if len(xys) == 0 {
			continue
		}
		slices.SortFunc(xys, func(a, b plotter.XY) int { return int(a.X*1000 - b.X*1000) })
		l, s, err := plotter.NewLinePoints(xys)
		if err != nil {
			return nil, err
		}
		l.Color, s.Color = plotutil.Color(i), plotutil.Color(i)
		s.Shape = plotutil.Shape(i)
		p.Add(l, s)
		p.Legend.Add(v, l, s)
		any = true
	}
	if !any {
		return nil, nil
	}
	p.Add(plotter.NewGrid())
	return p, nil
}

func plotVsMemory(order []groupKey, m map[groupKey]benchResult, on func(benchResult) bool) (*plot.Plot, error) {
	var name, mode string
	keep := func(r benchResult) bool {
		if !on(r) {
			return false
		}
		name, mode = r.Case.Workload, r.Case.Mode
		return true
	}
	var ticks []plot.Tick
	for _, k := range order {
		if r := m[k]; on(r) {
			g := float64(r.Case.Mem) / (1 << 30)
			ticks = append(ticks, plot.Tick{Value: g, Label: strconv.FormatFloat(g, 'g', -1, 64)})
		}
	}
	p, err := lines("", "vGPU memory (GiB, log scale)", order, m, keep, func(r benchResult) float64 { return float64(r.Case.Mem) / (1 << 30) })
	if p != nil {
		where := "in process"
		if mode == "qemu" {
			where = "real VMs"
		}
		p.Title.Text = "Downtime vs vGPU memory: " + name + ", " + where + " (log scales; +hash: no write log)"
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		p.X.Tick.Marker, p.Y.Tick.Marker = plot.ConstantTicks(ticks), plot.LogTicks{Prec: -1}
	}
	return p, err
}

func plotVsRate(order []groupKey, m map[groupKey]benchResult) (*plot.Plot, error) {
	var size string
	keep := func(r benchResult) bool {
		if !inSweep(r, "rate") {
			return false
		}
		size = sizeString(r.Case.Mem)
		return true
	}
	p, err := lines("", "dirty rate asked (MiB/s of guest time)", order, m, keep, func(r benchResult) float64 { return r.RateAsked })
	if p != nil {
		p.Title.Text = "Downtime vs dirty rate: " + size + " vGPU, in process"
	}
	return p, err
}

// plotStopPages is grouped bars: pages sent in the downtime, per workload
// of the profile comparison, one bar per variant.
func plotStopPages(order []groupKey, m map[groupKey]benchResult) (*plot.Plot, error) {
	var cases []string
	for _, k := range order {
		r := m[k]
		if inSweep(r, "profiles") && !slices.Contains(cases, k.caseKey) {
			cases = append(cases, k.caseKey)
		}
	}
	if len(cases) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "Pages sent in the downtime, per strategy (log scale; 0 shows as 1)"
	p.Y.Label.Text = "pages"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{}
	p.Legend.Top = true
	vars := variantsOf(order)
	var names []string
	for _, ck := range cases {
		names = append(names, m[groupKey{ck, vars[0]}].Case.Workload)
	}
	for i, v := range vars {
		var xys plotter.XYs
		for j, ck := range cases {
			if r, ok := m[groupKey{ck, v}]; ok {
				// Zero pages show as one (a log scale has no zero).
				xys = append(xys, plotter.XY{X: float64(j) + 0.12*(float64(i)-float64(len(vars)-1)/2), Y: max(1, float64(r.StopPages))})
			}
		}
		s, err := plotter.NewScatter(xys)
		if err != nil {
			return nil, err
		}
		s.Color, s.Shape, s.Radius = plotutil.Color(i), plotutil.Shape(i), vg.Points(4)
		p.Add(s)
		p.Legend.Add(v, s)
	}
	p.NominalX(names...)
	p.X.Tick.Label.Rotation = 0.3
	p.X.Tick.Label.XAlign = draw.XRight
	p.Add(plotter.NewGrid())
	return p, nil
}

// termColors gives each downtime term its own colour (plotutil's
// palette has seven).
var termColors = []color.Color{
	color.RGBA{0x1f, 0x77, 0xb4, 0xff}, color.RGBA{0xff, 0x7f, 0x0e, 0xff}, color.RGBA{0x2c, 0xa0, 0x2c, 0xff},
	color.RGBA{0xd6, 0x27, 0x28, 0xff}, color.RGBA{0x94, 0x67, 0xbd, 0xff}, color.RGBA{0x8c, 0x56, 0x4b, 0xff},
	color.RGBA{0xe3, 0x77, 0xc2, 0xff}, color.RGBA{0x7f, 0x7f, 0x7f, 0xff}, color.RGBA{0xbc, 0xbd, 0x22, 0xff},
	color.RGBA{0x17, 0xbe, 0xcf, 0xff}, color.RGBA{0x39, 0x3b, 0x79, 0xff}, color.RGBA{0xad, 0x49, 0x4a, 0xff},
	color.RGBA{0x63, 0x79, 0x39, 0xff}, color.RGBA{0x00, 0x00, 0x00, 0xff},
}

// plotTerms stacks each variant's downtime terms for the profile
// comparison's first case (and the same case with real VMs).
func plotTerms(order []groupKey, m map[groupKey]benchResult) (*plot.Plot, error) {
	var first string
	for _, k := range order {
		if r := m[k]; inSweep(r, "profiles") {
			first = r.Case.Workload + "/" + sizeString(r.Case.Mem)
			break
		}
	}
	var bars []benchResult
	for _, k := range order {
		r := m[k]
		// Stop-and-copy's transfer would dwarf the other bars: the
		// tables have its terms.
		if r.Case.Workload+"/"+sizeString(r.Case.Mem) == first && r.Strategy != "stopcopy" {
			bars = append(bars, r)
		}
	}
	if len(bars) == 0 {
		return nil, nil
	}
	p := plot.New()
	p.Title.Text = "Downtime split into its terms: " + bars[0].Case.Workload + " on " + sizeString(bars[0].Case.Mem) + " (medians; stopcopy in the tables)"
	p.Y.Label.Text = "ms"
	p.Legend.Top = true
	var names []string
	for _, r := range bars {
		names = append(names, r.Case.Mode+" "+r.Variant)
	}
	w := vg.Points(40)
	var below *plotter.BarChart
	for i, tc := range termColumns {
		vals := make(plotter.Values, len(bars))
		nonzero := false
		for j, r := range bars {
			vals[j] = max(0, r.term(tc.term))
			nonzero = nonzero || vals[j] > 0.05
		}
		if !nonzero {
			continue
		}
		b, err := plotter.NewBarChart(vals, w)
		if err != nil {
			return nil, err
		}
		b.Color = termColors[i%len(termColors)]
		b.LineStyle.Width = 0
		if below != nil {
			b.StackOn(below)
		}
		below = b
		p.Add(b)
		p.Legend.Add(tc.head, b)
	}
	p.NominalX(names...)
	p.Legend.ThumbnailWidth = 8 * vg.Millimeter
	p.Legend.TextStyle.Font.Size = 8
	p.X.Tick.Label.Rotation = 0.3
	p.X.Tick.Label.XAlign = draw.XRight
	p.Add(plotter.NewGrid())
	return p, nil
}
