package main

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gmig-dev/gmig/internal/bytesize"
)

// dirtyAmount is what a downtime run's guest dirties after the
// pre-copy: a fraction of the vGPU's pages, or a number of bytes (the
// same dirty bytes at every size).
type dirtyAmount struct {
	frac  float64
	bytes uint64
}

// bytesOf is the amount in bytes of a vGPU of size bytes.
func (a dirtyAmount) bytesOf(size uint64) uint64 {
	if a.bytes > 0 {
		return min(a.bytes, size)
	}
	return uint64(a.frac * float64(size))
}

func (a dirtyAmount) String() string {
	if a.bytes > 0 {
		return fmtSize(a.bytes)
	}
	return strconv.FormatFloat(100*a.frac, 'g', -1, 64) + "%"
}

// parseDirty reads -dirty: fractions in [0, 1] or sizes with a unit
// (16M), comma-separated.
func parseDirty(s string) ([]dirtyAmount, error) {
	var out []dirtyAmount
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if strings.ContainsAny(f, "KMGkmg") {
			n, err := bytesize.Parse(f)
			if err != nil || n == 0 {
				return nil, fmt.Errorf("gmig-nvbench: bad dirty size %q: want a size such as 16M", f)
			}
			out = append(out, dirtyAmount{bytes: n})
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v < 0 || v > 1 {
			return nil, fmt.Errorf("gmig-nvbench: bad dirty fraction %q: want a number in [0, 1] or a size such as 16M", f)
		}
		out = append(out, dirtyAmount{frac: v})
	}
	return out, nil
}

// parseTracking reads -tracking: the runs' write-log settings, true for
// the log.
func parseTracking(s string) ([]bool, error) {
	switch s {
	case "on":
		return []bool{true}, nil
	case "off":
		return []bool{false}, nil
	case "both":
		return []bool{true, false}, nil
	}
	return nil, fmt.Errorf("gmig-nvbench: -tracking %q: want on, off or both", s)
}

// dtRow is one run of the downtime matrix.
type dtRow struct {
	size  uint64
	dirty dirtyAmount
	strat string
	track bool
	r     dtResult
}

// downtimeCell is a downtime with its scan and transfer terms in
// brackets, as docs/benchmarks.md quotes it.
func (d dtRow) downtimeCell() string {
	s := d.r.rep.Precopy.Stop
	return fmt.Sprintf("%.2f (%.2f + %.2f)", ms(d.r.rep.Downtime), ms(s.Scan), ms(s.Transfer))
}

// writeTrackingTable prints each run with the write log beside the same
// run without it, where both ran.
func writeTrackingTable(out io.Writer, rows []dtRow) error {
	type key struct {
		size  uint64
		dirty dirtyAmount
		strat string
	}
	hashed := map[key]dtRow{}
	for _, d := range rows {
		if !d.track {
			hashed[key{d.size, d.dirty, d.strat}] = d
		}
	}
	if len(hashed) == 0 {
		return nil
	}
	fmt.Fprintln(out, "\n== the guest-write log beside the full hash: downtime pause→resume in ms (scan + transfer in brackets)")
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "size\tdirty\tstrategy\twrite log\tfull hash\tlog / hash\tstop pages (log)\tstop pages (hash)\t")
	for _, d := range rows {
		h, ok := hashed[key{d.size, d.dirty, d.strat}]
		if !d.track || !ok {
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%.2f\t%d\t%d\t\n", fmtSize(d.size), d.dirty, d.strat, d.downtimeCell(), h.downtimeCell(),
			float64(d.r.rep.Downtime)/float64(max(h.r.rep.Downtime, 1)), d.r.rep.Precopy.Stop.DirtyPages, h.r.rep.Precopy.Stop.DirtyPages)
	}
	return tw.Flush()
}
