package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/precopy"
)

// TestBurstPlan: the dirty profile picks exactly its share of the pages
// (1 % of them, or 16 MiB's worth), all distinct, none the driver's,
// spread over the whole vGPU; check passes the burst's result and fails
// a page left out or a page changed beside it.
func TestBurstPlan(t *testing.T) {
	mem := make([]byte, 64<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < len(mem)/2; i += 8 { // half the pages hold data
		binary.LittleEndian.PutUint64(mem[i:], rng.Uint64())
	}
	total := len(mem) / abi.PageSize
	skip := map[int]bool{0: true, 1: true, total - 1: true}
	for _, tc := range []struct {
		spec string
		want int
	}{{"dirty:pct=1", 164}, {"dirty:pct=10", 1638}, {"dirty:bytes=4M", 1024}} {
		b, err := parseBurst(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		if b.String() != tc.spec {
			t.Errorf("%s reads back as %s", tc.spec, b)
		}
		pl, err := planBurst(b, mem, skip, 7, 2)
		if err != nil {
			t.Fatal(err)
		}
		if len(pl.pages) != tc.want {
			t.Fatalf("%s: %d pages of %d, want %d", tc.spec, len(pl.pages), total, tc.want)
		}
		var quarters [4]int
		for i, p := range pl.pages {
			if skip[p] || i > 0 && p <= pl.pages[i-1] {
				t.Fatalf("%s: page %d (after %v) is the driver's or not in order", tc.spec, p, pl.pages[max(0, i-1)])
			}
			quarters[p*4/total]++
		}
		for i, n := range quarters {
			if share := float64(n) / float64(tc.want); share < 0.25/2 || share > 0.25*1.5 {
				t.Errorf("%s: quarter %d of the vGPU has %d of the %d pages: not spread", tc.spec, i, n, tc.want)
			}
		}
		dst := bytes.Clone(mem)
		pl.write(dst)
		if err := pl.check(dst, 2); err != nil {
			t.Fatalf("%s: the burst's own result: %v", tc.spec, err)
		}
		missed := bytes.Clone(dst)
		p := pl.pages[len(pl.pages)/2]
		binary.LittleEndian.PutUint64(missed[p*abi.PageSize+pl.off[len(pl.pages)/2]:], pl.old[len(pl.pages)/2])
		if err := pl.check(missed, 2); err == nil {
			t.Errorf("%s: a page the burst wrote, missed: check passes", tc.spec)
		}
		beside := bytes.Clone(dst)
		beside[p*abi.PageSize+(pl.off[len(pl.pages)/2]+8)%abi.PageSize]++
		if err := pl.check(beside, 2); err == nil {
			t.Errorf("%s: a byte changed beside the guest's word: check passes", tc.spec)
		}
	}
	for _, bad := range []string{"dirty", "dirty:pct=0", "dirty:pct=101", "dirty:pct=x", "dirty:bytes=1", "dirty:size=1M", "dirtyx:pct=1"} {
		if _, err := parseBenchProfiles(bad); err == nil {
			t.Errorf("profile %q accepted", bad)
		}
	}
}

// TestBenchBurstTracking runs the dirty profile in process with
// -compare-tracking: every migration's destination memory must equal the
// source's and the guest's stores (bench returns an error otherwise);
// oneshot and iterative stop with the 1 % the guest wrote (± the pages of
// the stop's own bookkeeping), with the write log and with the full hash;
// the side-by-side table has both columns.
func TestBenchBurstTracking(t *testing.T) {
	var out, status bytes.Buffer
	bp, err := parseBenchProfiles("dirty:pct=1")
	if err != nil {
		t.Fatal(err)
	}
	c := benchConfig{out: &out, status: &status, inproc: true, fill: 0.5, seed: 3, runs: 1, steps: 40,
		mems: []uint64{32 << 20, 64 << 20}, memProfiles: bp, strategies: precopy.Strategies, log: zerolog.Nop(),
		compareTracking: true, outDir: t.TempDir()}
	if err := c.run(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, status.String())
	}
	f := &benchFile{}
	if err := readResults(filepath.Join(c.outDir, "results.json"), f); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(c.outDir, "downtime-vs-memory.png")); err != nil {
		t.Errorf("no plot of downtime against vGPU memory: %v", err)
	}
	seen := map[string]bool{}
	for _, r := range f.Results {
		seen[r.Variant] = true
		want := int(r.Case.Mem / abi.PageSize / 100)
		if r.BurstPages < want-1 || r.BurstPages > want+1 {
			t.Errorf("%s on %s: the guest wrote %d pages, want 1 %% = %d", r.Variant, sizeString(r.Case.Mem), r.BurstPages, want)
		}
		if r.Strategy == precopy.StopCopy {
			continue
		}
		// The stop phase sends what the guest wrote, and at most a few
		// pages more (the driver's and the engine's own).
		if r.StopPages < r.BurstPages || r.StopPages > r.BurstPages+8 {
			t.Errorf("%s on %s: %d pages at the stop, the guest wrote %d", r.Variant, sizeString(r.Case.Mem), r.StopPages, r.BurstPages)
		}
		if got := r.Report.Precopy.Stop.WriteLog.Active; got == r.FullHash {
			t.Errorf("%s: write log active %v, full hash %v", r.Variant, got, r.FullHash)
		}
	}
	for _, v := range []string{"oneshot", "oneshot+hash", "iterative", "iterative+hash", "stopcopy"} {
		if !seen[v] {
			t.Errorf("no %s run: %v", v, seen)
		}
	}
	if seen["stopcopy+hash"] {
		t.Error("stopcopy ran twice (it hashes nothing)")
	}
	s := out.String()
	for _, want := range []string{"the guest-write log beside the full hash", "write log", "full hash", "log / hash", "1 % (82 pages)", "× smallest"} {
		if !strings.Contains(s, want) {
			t.Errorf("tables lack %q:\n%s", want, s)
		}
	}
}

// TestReplotMerges: -replot with two results.json files shows the
// results of both in one side-by-side table (the write log's run and the
// full hash's run made apart).
func TestReplotMerges(t *testing.T) {
	dir := t.TempDir()
	hash := fakeResult("oneshot+hash", precopy.OneShot, 1, 70*time.Millisecond, 10*time.Millisecond, 100)
	hash.FullHash = true
	for i, rs := range [][]benchResult{{fakeResult("oneshot", precopy.OneShot, 1, 30*time.Millisecond, 10*time.Millisecond, 100)}, {hash}} {
		c := benchConfig{outDir: filepath.Join(dir, fmt.Sprint(i))}
		if err := c.save(&benchFile{Command: fmt.Sprint("run ", i), Results: rs}); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	c := benchConfig{out: &out, outDir: filepath.Join(dir, "both")}
	if err := c.replot(filepath.Join(dir, "0", "results.json") + "," + filepath.Join(dir, "1", "results.json")); err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(filepath.Join(c.outDir, "results.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "| inproc | render | 1 GiB | oneshot | 40.00 (30.00 + 10.00) | 80.00 (70.00 + 10.00) | 0.50 |"; !strings.Contains(string(md), want) || !strings.Contains(string(md), "run 0; run 1") {
		t.Fatalf("results.md lacks %q or the two commands:\n%s", want, md)
	}
	var both benchFile
	if err := readResults(filepath.Join(c.outDir, "results.json"), &both); err != nil || len(both.Results) != 2 {
		t.Fatalf("the merged results.json: %d results, %v", len(both.Results), err)
	}
	if err := c.replot(filepath.Join(dir, "none.json")); err == nil {
		t.Fatal("a missing results.json replotted")
	}
}

// TestPlotOneSize: a memory sweep of one size draws no downtime-vs-memory
// plot (a log axis of one value has no range: gonum/plot panicked) and
// fails nothing.
func TestPlotOneSize(t *testing.T) {
	r := fakeResult("oneshot", precopy.OneShot, 1, 30*time.Millisecond, 10*time.Millisecond, 100)
	r.Case.Sweep, r.Case.Mem = "memory", 16<<20
	dir := t.TempDir()
	if err := writePlots(dir, &benchFile{Results: []benchResult{r}}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "downtime-vs-memory.png")); err == nil {
		t.Error("a plot of one size")
	}
}
