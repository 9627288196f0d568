package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/gmig-dev/gmig/orchestrator"
)

// The tables gmig-bench prints (aligned text) and writes (markdown): the
// same rows, built once.

// table is a header and rows of cells.
type table struct {
	title string
	head  []string
	rows  [][]string
}

func (t table) text(w io.Writer) {
	fmt.Fprintf(w, "\n%s\n", t.title)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, strings.Join(t.head, "\t")+"\t")
	for _, r := range t.rows {
		fmt.Fprintln(tw, strings.Join(r, "\t")+"\t")
	}
	tw.Flush()
}

func (t table) markdown(w io.Writer) {
	fmt.Fprintf(w, "\n%s\n\n| %s |\n|", t.title, strings.Join(t.head, " | "))
	for range t.head {
		fmt.Fprint(w, "---:|")
	}
	fmt.Fprintln(w)
	for _, r := range t.rows {
		fmt.Fprintf(w, "| %s |\n", strings.Join(r, " | "))
	}
}

// resultsTable is one row per migration.
func resultsTable(rs []benchResult) table {
	t := table{
		title: "Downtime (pause → resume, host clock) beside the stop phase's physical limit; times in ms",
		head: []string{"mode", "workload", "vGPU", "strategy", "run", "downtime", "guest gap", "stop phase", "limit",
			"stop/limit", "pages in downtime", "MiB in downtime", "pre-copy", "pre-copy MiB", "total MiB", "used MiB",
			"scan ms/GiB", "dirty MiB/s asked", "achieved", "digest"},
	}
	for _, r := range rs {
		achieved := f2(r.RateAchieved)
		if r.HeldEarlyMS > 0 {
			achieved += fmt.Sprintf(" (held %.0f ms early)", r.HeldEarlyMS)
		}
		t.rows = append(t.rows, []string{r.Case.Mode, r.Case.Workload, sizeString(r.Case.Mem), r.Variant, fmt.Sprint(r.Run),
			f2(r.DowntimeMS), f2(r.GuestGapMS), f2(r.StopPhaseMS), f2(r.LimitMS), f2(r.StopVsLimit),
			fmt.Sprint(r.StopPages), f2(mibs(r.StopBytes)), fmt.Sprintf("%.0f", r.PrecopyMS), f1(mibs(r.PrecopyBytes)),
			f1(mibs(r.TotalBytes)), usedMiB(r), f1(r.ScanMSPerGiB), f1(r.RateAsked), achieved, okString(r.DigestOK)})
	}
	return t
}

func usedMiB(r benchResult) string {
	if r.UsedBytes == 0 {
		return "-"
	}
	return f1(mibs(r.UsedBytes))
}

func okString(ok bool) string {
	if ok {
		return "ok"
	}
	return "-"
}

// termTable splits each downtime into its terms, and the limit into its.
func termTable(rs []benchResult) table {
	t := table{title: "The downtime's consecutive terms (ms), and the limit's (hash + link + restore)",
		head: []string{"mode", "workload", "vGPU", "strategy", "run"}}
	for _, tc := range termColumns {
		t.head = append(t.head, tc.head)
	}
	t.head = append(t.head, "limit: hash", "link", "restore")
	for _, r := range rs {
		row := []string{r.Case.Mode, r.Case.Workload, sizeString(r.Case.Mem), r.Variant, fmt.Sprint(r.Run)}
		for _, tc := range termColumns {
			row = append(row, f2(r.term(tc.term)))
		}
		row = append(row, f2(ms(r.Limit.Hash)), f2(ms(r.Limit.Link)), f2(ms(r.Limit.Restore)))
		t.rows = append(t.rows, row)
	}
	return t
}

// termColumns are the downtime's terms as the tables show them.
var termColumns = []struct{ head, term string }{
	{"pause", orchestrator.TermPause}, {"quiesce", orchestrator.TermQuiesce}, {"scan", orchestrator.TermScan},
	{"transfer", orchestrator.TermTransfer}, {"restore", orchestrator.TermRestore}, {"replay", orchestrator.TermReplay},
	{"tail", orchestrator.TermVerdict}, {"vmm", orchestrator.TermSwitchover}, {"commit", orchestrator.TermCommit},
	{"load", orchestrator.TermLoad}, {"front", orchestrator.TermFrontEnd}, {"record", orchestrator.TermRecord}, {"engine", orchestrator.TermEngine},
	{"resume", orchestrator.TermResume},
}

// groupKey identifies a case and variant for means and ratios.
type groupKey struct {
	caseKey, variant string
}

// means takes the median of each case's runs of each variant (a shared
// machine's outliers move a mean), in first-seen order.
func means(rs []benchResult) ([]groupKey, map[groupKey]benchResult) {
	var order []groupKey
	groups := map[groupKey][]benchResult{}
	for _, r := range rs {
		k := groupKey{r.Case.String(), r.Variant}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	out := map[groupKey]benchResult{}
	for k, g := range groups {
		m := g[0]
		pick := func(f func(benchResult) float64) float64 {
			v := make([]float64, len(g))
			for i, r := range g {
				v[i] = f(r)
			}
			return median(v)
		}
		m.DowntimeMS = pick(func(r benchResult) float64 { return r.DowntimeMS })
		m.GuestGapMS = pick(func(r benchResult) float64 { return r.GuestGapMS })
		m.StopPhaseMS = pick(func(r benchResult) float64 { return r.StopPhaseMS })
		m.LimitMS = pick(func(r benchResult) float64 { return r.LimitMS })
		m.StopPages = int(pick(func(r benchResult) float64 { return float64(r.StopPages) }))
		m.StopBytes = uint64(pick(func(r benchResult) float64 { return float64(r.StopBytes) }))
		m.TotalBytes = uint64(pick(func(r benchResult) float64 { return float64(r.TotalBytes) }))
		m.Terms = append([]termMS(nil), m.Terms...)
		for i := range m.Terms {
			name := m.Terms[i].Name
			m.Terms[i].MS = pick(func(r benchResult) float64 { return r.term(name) })
		}
		out[k] = m
	}
	return order, out
}

// ratioTable sets each variant's means against stop-and-copy's in the
// same case.
func ratioTable(rs []benchResult) table {
	t := table{title: "Ratios against stopcopy in the same case (medians of the runs)",
		head: []string{"mode", "workload", "vGPU", "strategy", "downtime", "guest gap", "pages in downtime", "bytes in downtime", "all bytes sent"}}
	order, m := means(rs)
	for _, k := range order {
		r := m[k]
		base, ok := m[groupKey{k.caseKey, "stopcopy"}]
		if !ok || base.DowntimeMS == 0 {
			continue
		}
		t.rows = append(t.rows, []string{r.Case.Mode, r.Case.Workload, sizeString(r.Case.Mem), r.Variant,
			f3(r.DowntimeMS / base.DowntimeMS), f3(r.GuestGapMS / max(base.GuestGapMS, 1e-9)),
			f3(float64(r.StopPages) / float64(max(base.StopPages, 1))),
			f3(float64(r.StopBytes) / float64(max(base.StopBytes, 1))),
			f3(float64(r.TotalBytes) / float64(max(base.TotalBytes, 1)))})
	}
	return t
}

// serialTable sets the pipelined stop phase against the serial one
// (-compare-serial), case by case: before/after from one run.
func serialTable(rs []benchResult) table {
	t := table{title: "Stop phase: serial (scan everything, then copy, hash and send: before) against pipelined (after), medians of the runs (ms)",
		head: []string{"mode", "workload", "vGPU", "strategy", "serial stop", "pipelined stop", "after/before", "serial downtime", "pipelined downtime", "after/before"}}
	order, m := means(rs)
	for _, k := range order {
		base, ok := strings.CutSuffix(k.variant, "-serial")
		if !ok {
			continue
		}
		b, a := m[k], m[groupKey{k.caseKey, base}]
		if a.StopPhaseMS == 0 || b.StopPhaseMS == 0 {
			continue
		}
		t.rows = append(t.rows, []string{b.Case.Mode, b.Case.Workload, sizeString(b.Case.Mem), base,
			f2(b.StopPhaseMS), f2(a.StopPhaseMS), f3(a.StopPhaseMS / b.StopPhaseMS),
			f2(b.DowntimeMS), f2(a.DowntimeMS), f3(a.DowntimeMS / b.DowntimeMS)})
	}
	return t
}

// ratesTable lists the machine rates each case was measured beside.
func ratesTable(rs []benchResult) table {
	t := table{title: "This machine's rates, measured before each case (GB/s; load = 1-minute load average)",
		head: []string{"case", "scan (hash in place)", "hash+copy", "loopback TCP", "memcpy", "workers", "load"}}
	seen := map[string]bool{}
	for _, r := range rs {
		k := r.Case.String()
		if seen[k] {
			continue
		}
		seen[k] = true
		x := r.Rates
		t.rows = append(t.rows, []string{k, f2(x.Scan / 1e9), f2(x.HashCopy / 1e9), f2(x.Link / 1e9), f2(x.Memcpy / 1e9),
			fmt.Sprint(x.Workers), f1(x.Load1)})
	}
	return t
}

func f1(v float64) string { return fmt.Sprintf("%.1f", v) }
func f2(v float64) string { return fmt.Sprintf("%.2f", v) }
func f3(v float64) string { return fmt.Sprintf("%.3f", v) }

// tables are every table of a run, in order.
func tables(f *benchFile) []table {
	ts := []table{resultsTable(f.Results), termTable(f.Results), ratioTable(f.Results)}
	if s := serialTable(f.Results); len(s.rows) > 0 {
		ts = append(ts, s)
	}
	if tr := trackingTable(f.Results); len(tr.rows) > 0 {
		ts = append(ts, tr, sizeTable(f.Results))
	}
	ts = append(ts, ratesTable(f.Results))
	for _, o := range f.Overhead {
		ts = append(ts, o.table())
	}
	return ts
}

// writeTables prints the tables as aligned text.
func writeTables(w io.Writer, f *benchFile) {
	for _, t := range tables(f) {
		t.text(w)
	}
}

// writeMarkdown writes results.md.
func writeMarkdown(w io.Writer, f *benchFile) {
	m := f.Machine
	fmt.Fprintf(w, "# gmig-bench results\n\n`%s`\n\n%d cores (GOMAXPROCS %d), %d hashing workers, %s; load average %.1f at the start, %.1f at the end; %s to %s.\n",
		f.Command, m.Cores, m.GOMAXPROCS, m.Workers, m.Go, m.Load1, m.Load1End,
		f.Started.Format("2006-01-02 15:04:05"), f.Finished.Format("15:04:05"))
	for _, t := range tables(f) {
		t.markdown(w)
	}
}
