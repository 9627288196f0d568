package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/gmig-dev/gmig/orchestrator"
)

// progressPrinter shows a migration's Progress: a one-line bar rewritten in
// place on a terminal, a line per phase otherwise, or JSON lines.
type progressPrinter struct {
	w     io.Writer
	json  bool
	tty   bool
	phase string
	drawn bool
}

func newProgressPrinter(w io.Writer, jsonLines, tty bool) *progressPrinter {
	return &progressPrinter{w: w, json: jsonLines, tty: tty}
}

// show renders one snapshot.
func (p *progressPrinter) show(pr orchestrator.Progress) {
	if p.json {
		b, _ := json.Marshal(map[string]any{"progress": pr})
		fmt.Fprintf(p.w, "%s\n", b)
		return
	}
	line := progressLine(pr)
	switch {
	case p.tty:
		fmt.Fprintf(p.w, "\r\033[K%s", line)
		p.drawn = true
	case pr.Phase != p.phase:
		fmt.Fprintln(p.w, line)
	}
	p.phase = pr.Phase
}

// done ends the bar's line.
func (p *progressPrinter) done() {
	if p.tty && p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
}

// progressLine is one snapshot as text: phase, vGPU pages and rate, the
// VMM's RAM.
func progressLine(pr orchestrator.Progress) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%7.2fs %-12s", pr.Elapsed.Seconds(), pr.Phase)
	if pr.TotalPages > 0 {
		frac := min(float64(pr.Pages)/float64(pr.TotalPages), 1)
		const width = 20
		n := int(frac * width)
		fmt.Fprintf(&b, " vGPU [%s%s] %d/%d pages, %.1f MiB, %.0f MiB/s",
			strings.Repeat("#", n), strings.Repeat(".", width-n), pr.Pages, pr.TotalPages,
			float64(pr.Bytes)/(1<<20), pr.Rate/(1<<20))
	}
	if v := pr.VMM; v.Total > 0 {
		fmt.Fprintf(&b, " | RAM %s: %.0f/%.0f MiB sent, %.0f MiB left", v.Status,
			float64(v.Transferred)/(1<<20), float64(v.Total)/(1<<20), float64(v.Remaining)/(1<<20))
	}
	return b.String()
}
