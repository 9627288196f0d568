package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/precopy"
)

// fakeResult is a result as a run makes it, with a downtime split into a
// scan and a transfer.
func fakeResult(variant string, st precopy.Strategy, run int, scan, transfer time.Duration, pages int) benchResult {
	r := benchResult{Case: benchCase{Mode: "inproc", Sweep: "profiles", Workload: "render", Mem: 1 << 30},
		Variant: variant, Strategy: st, Run: run, Rates: machineRates{Scan: 1 << 30, Link: 1 << 30, Memcpy: 1 << 30}}
	r.Report.Downtime = scan + transfer
	r.Report.Terms = []orchestrator.Term{{Name: orchestrator.TermScan, D: scan}, {Name: orchestrator.TermTransfer, D: transfer}}
	r.Report.Precopy.Stop = precopy.StopReport{Total: scan + transfer, Scan: scan, Transfer: transfer, DirtyPages: pages, Bytes: uint64(pages) * 4096}
	r.DigestOK = true
	r.finish()
	return r
}

// TestBenchOutput checks the JSON, the markdown tables and the medians
// and ratios they show.
func TestBenchOutput(t *testing.T) {
	f := &benchFile{Command: "gmig-bench -test", Machine: benchMachine{Cores: 2, GOMAXPROCS: 2}}
	f.Results = []benchResult{
		fakeResult("oneshot", precopy.OneShot, 1, 30*time.Millisecond, 10*time.Millisecond, 100),
		fakeResult("oneshot", precopy.OneShot, 2, 90*time.Millisecond, 10*time.Millisecond, 100), // an outlier
		fakeResult("oneshot", precopy.OneShot, 3, 30*time.Millisecond, 10*time.Millisecond, 100),
		fakeResult("oneshot-serial", precopy.OneShot, 1, 40*time.Millisecond, 40*time.Millisecond, 100),
		fakeResult("stopcopy", precopy.StopCopy, 1, 0, 400*time.Millisecond, 1000),
	}
	f.Overhead = []overheadResult{{Workload: "render", Mem: 1 << 28, Ratios: []float64{0.99, 1.0, 0.98}, Median: 0.99, OverheadPct: 1, OffMiBs: []float64{100}, OnMiBs: []float64{99}}}
	var md bytes.Buffer
	writeMarkdown(&md, f)
	s := md.String()
	for _, want := range []string{
		"| mode | workload | vGPU | strategy | run | downtime |",
		"| inproc | render | 1 GiB | oneshot | 2 | 100.00 |",
		// Medians: oneshot 40 ms of stopcopy's 400; pages 100 of 1000.
		"| inproc | render | 1 GiB | oneshot | 0.100 | ",
		"| 0.100 | 0.100 |",
		// Serial 80 ms against pipelined 40 ms.
		"| inproc | render | 1 GiB | oneshot | 80.00 | 40.00 | 0.500 |",
		"1.00 %",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("markdown lacks %q:\n%s", want, s)
		}
	}
	var text bytes.Buffer
	writeTables(&text, f)
	if !strings.Contains(text.String(), "Ratios against stopcopy") {
		t.Errorf("text tables:\n%s", text.String())
	}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	var back benchFile
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Results) != 5 || back.Results[1].DowntimeMS != 100 || back.Results[0].Terms[0].Name != orchestrator.TermScan ||
		back.Results[4].StopPages != 1000 || back.Overhead[0].OverheadPct != 1 {
		t.Fatalf("JSON round trip: %+v", back.Results)
	}
	for _, key := range []string{`"downtime_ms"`, `"guest_gap_ms"`, `"limit_ms"`, `"stop_vs_limit"`, `"stop_pages"`, `"dirty_rate_achieved_mibps"`} {
		if !bytes.Contains(b, []byte(key)) {
			t.Errorf("JSON lacks %s", key)
		}
	}
}

// TestTrackingTable: a variant run with the write log and without sits
// in one row, each downtime with its scan and transfer terms, and their
// ratio; a variant without its twin has no row.
func TestTrackingTable(t *testing.T) {
	hash := fakeResult("oneshot+hash", precopy.OneShot, 1, 70*time.Millisecond, 10*time.Millisecond, 100)
	hash.FullHash = true
	f := &benchFile{Results: []benchResult{
		fakeResult("oneshot", precopy.OneShot, 1, 30*time.Millisecond, 10*time.Millisecond, 100), hash,
		fakeResult("iterative", precopy.Iterative, 1, 30*time.Millisecond, 10*time.Millisecond, 100),
	}}
	var md bytes.Buffer
	writeMarkdown(&md, f)
	s := md.String()
	for _, want := range []string{
		"| mode | dirty at the stop | vGPU | strategy | write log | full hash | log / hash |",
		"| inproc | render | 1 GiB | oneshot | 40.00 (30.00 + 10.00) | 80.00 (70.00 + 10.00) | 0.50 | 100 | 100 |",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("markdown lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "| inproc | render | 1 GiB | iterative | 40.00 (30.00 + 10.00) |") {
		t.Errorf("iterative has no full-hash twin, yet a row:\n%s", s)
	}
}

// TestQEMUProfiles: the real-VM matrix refuses the dirty profile (the
// in-guest program has no such workload) and a bad size, saying which
// flag.
func TestQEMUProfiles(t *testing.T) {
	for _, q := range []qemuBenchConfig{{memsFlag: "1G", profFlag: "dirty:pct=1"}, {memsFlag: "1X", profFlag: "cpu"}, {memsFlag: "1G", profFlag: "nope"}} {
		if err := q.parse(); err == nil || !strings.Contains(err.Error(), "-qemu-") {
			t.Errorf("%+v: %v", q, err)
		}
	}
	q := qemuBenchConfig{memsFlag: "1G,4G", profFlag: "cpu:mem=16M:rate=400"}
	if err := q.parse(); err != nil || len(q.mems) != 2 || len(q.profiles) != 1 {
		t.Fatalf("%+v: %v", q, err)
	}
}
