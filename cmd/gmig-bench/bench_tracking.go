package main

import (
	"fmt"
	"strings"

	"github.com/gmig-dev/gmig/orchestrator"
)

// The write log beside the full hash: each variant run with the log and
// without (-compare-tracking, or two runs' results.json read together),
// side by side.

// downtimeCell is a downtime with its scan and transfer terms in
// brackets, as docs/benchmarks.md quotes it.
func downtimeCell(r benchResult) string {
	return fmt.Sprintf("%.2f (%.2f + %.2f)", r.DowntimeMS, r.term(orchestrator.TermScan), r.term(orchestrator.TermTransfer))
}

// dirtyLabel is what a case leaves dirty at the stop, for the tables:
// the dirty profile's pages or its workload.
func dirtyLabel(r benchResult) string {
	if b := r.Case.Burst; b != nil {
		if b.Bytes > 0 {
			return fmt.Sprintf("%s (%d pages)", sizeString(b.Bytes), r.BurstPages)
		}
		return fmt.Sprintf("%g %% (%d pages)", b.Pct, r.BurstPages)
	}
	return r.Case.Workload
}

// trackingTable sets each variant with the write log beside the same
// variant with the full hash, in the same case (medians of the runs).
func trackingTable(rs []benchResult) table {
	t := table{title: "Downtime pause → resume (ms; scan + transfer in brackets): the guest-write log beside the full hash, medians of the runs",
		head: []string{"mode", "dirty at the stop", "vGPU", "strategy", "write log", "full hash", "log / hash", "pages (log)", "pages (hash)"}}
	order, m := means(rs)
	for _, k := range order {
		base, ok := strings.CutSuffix(k.variant, fullHashSuffix)
		if !ok {
			continue
		}
		h, l := m[k], m[groupKey{k.caseKey, base}]
		if l.DowntimeMS == 0 || h.DowntimeMS == 0 {
			continue
		}
		t.rows = append(t.rows, []string{l.Case.Mode, dirtyLabel(l), sizeString(l.Case.Mem), base,
			downtimeCell(l), downtimeCell(h), f2(l.DowntimeMS / h.DowntimeMS), fmt.Sprint(l.StopPages), fmt.Sprint(h.StopPages)})
	}
	return t
}

// sizeTable sets each downtime of the memory sweep against the same
// workload's and variant's at the sweep's smallest vGPU: with the same
// dirty bytes, how the downtime grows with the vGPU's size.
func sizeTable(rs []benchResult) table {
	t := table{title: "Downtime against the same workload and variant at the smallest vGPU of the memory sweep (medians)",
		head: []string{"mode", "dirty at the stop", "variant", "vGPU", "downtime ms", "× smallest"}}
	order, m := means(rs)
	type line struct{ mode, workload, variant string }
	smallest := map[line]benchResult{}
	var lines []line
	for _, k := range order {
		r := m[k]
		if !inSweep(r, "memory") && r.Case.Mode != "qemu" {
			continue
		}
		l := line{r.Case.Mode, r.Case.Workload, k.variant}
		s, ok := smallest[l]
		if !ok {
			lines = append(lines, l)
		}
		if !ok || r.Case.Mem < s.Case.Mem {
			smallest[l] = r
		}
	}
	for _, l := range lines {
		s := smallest[l]
		for _, k := range order {
			r := m[k]
			if k.variant != l.variant || r.Case.Mode != l.mode || r.Case.Workload != l.workload || (!inSweep(r, "memory") && r.Case.Mode != "qemu") {
				continue
			}
			t.rows = append(t.rows, []string{l.mode, dirtyLabel(r), l.variant, sizeString(r.Case.Mem), f2(r.DowntimeMS), f2(r.DowntimeMS / max(s.DowntimeMS, 1e-9))})
		}
	}
	return t
}
