package main

import (
	"testing"
	"time"

	"github.com/gmig-dev/gmig/precopy"
)

// TestEstimateLimit checks the limit's arithmetic: read time for the pages
// hashed at the memory read rate, the stop phase's bytes over the link of
// its streams, the same bytes at memcpy speed.
func TestEstimateLimit(t *testing.T) {
	r := machineRates{Read: 4 << 30, Link: 1 << 30, Links: []float64{1 << 30, 2 << 30}, Memcpy: 8 << 30}
	l := estimateLimit(r, 262144, 512<<20, 1) // 1 GiB hashed, 512 MiB sent on one stream
	if l.Hash != 250*time.Millisecond || l.Link != 500*time.Millisecond || l.Restore != 62500*time.Microsecond {
		t.Fatalf("limit %+v", l)
	}
	if l.Total() != 812500*time.Microsecond {
		t.Fatalf("total %v", l.Total())
	}
	if l2 := estimateLimit(r, 262144, 512<<20, 2); l2.Link != 250*time.Millisecond {
		t.Fatalf("on 2 streams the link term is %v", l2.Link)
	}
	if z := estimateLimit(machineRates{}, 10, 10, 1); z.Total() != 0 {
		t.Fatalf("unmeasured rates give %v", z.Total())
	}
	res := benchResult{Rates: r, Case: benchCase{Mem: 1 << 30}}
	res.Report.Precopy.Stop.PagesHashed, res.Report.Precopy.Stop.Bytes = 262144, 512<<20
	res.Report.Precopy.Stop.Total = 1625 * time.Millisecond
	res.Report.Precopy.Stop.Scan = 15 * time.Millisecond
	res.Report.Downtime = 2 * time.Second
	res.finish()
	if res.LimitMS != 812.5 || res.StopVsLimit != 2 || res.ScanMSPerGiB != 15 {
		t.Fatalf("limit %.1f ms, stop/limit %.3f, scan %.1f ms/GiB", res.LimitMS, res.StopVsLimit, res.ScanMSPerGiB)
	}
}

// TestMeasureRates checks that every rate comes out positive.
func TestMeasureRates(t *testing.T) {
	r, err := measureRates(2)
	if err != nil {
		t.Fatal(err)
	}
	if r.Scan <= 0 || r.HashCopy <= 0 || r.Link <= 0 || r.Memcpy <= 0 || r.Read <= 0 || len(r.Links) != precopy.MaxDefaultStreams {
		t.Fatalf("rates %+v", r)
	}
	t.Logf("scan %.2f GB/s, hash+copy %.2f, link %.2f, memcpy %.2f", r.Scan/1e9, r.HashCopy/1e9, r.Link/1e9, r.Memcpy/1e9)
}
