package vfio

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeLogger is the fake device with a DMA log, marked by the test as a
// device would mark its writes.
type fakeLogger struct {
	*fakeDevice
	log DMALog
}

func (f *fakeLogger) DMALog() *DMALog { return &f.log }

func startLogServer(t *testing.T, maxXfer uint32) (*testServer, *fakeLogger) {
	t.Helper()
	dev := &fakeLogger{fakeDevice: newFakeDevice(t)}
	ts := startServerFor(t, dev, maxXfer)
	ts.dev = dev.fakeDevice
	return ts, dev
}

// set returns the bit numbers set in bitmap.
func set(bitmap []uint64) []uint64 {
	var out []uint64
	for w, v := range bitmap {
		for b := range uint64(64) {
			if v&(1<<b) != 0 {
				out = append(out, uint64(w)*64+b)
			}
		}
	}
	return out
}

func equalBits(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestDMALogging drives START, REPORT and STOP through the client: writes
// before START and outside the ranges are not logged; the report sets the
// bits of the written pages (in the report's page size, a page of 64 KiB
// covering sixteen 4 KiB ones) and clears them; a page the report only
// partly covers stays for the next; STOP ends it and a REPORT after it
// fails.
func TestDMALogging(t *testing.T) {
	ts, dev := startLogServer(t, 1<<16)
	c := dial(t, ts.path)
	for _, f := range []uint32{FeatureDMALoggingStart, FeatureDMALoggingStop, FeatureDMALoggingRep} {
		if err := c.ProbeFeature(f); err != nil {
			t.Fatalf("probe %d: %v", f, err)
		}
	}
	dev.log.Mark(0x10000, 8) // before START
	if _, err := c.DMALoggingReport(0, 1<<20, 4096); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("report before START: %v, want EINVAL", err)
	}
	ranges := []DMALoggingRange{{IOVA: 0x100000, Length: 0x100000}, {IOVA: 0, Length: 0x40000}}
	ps, err := c.DMALoggingStart(1<<21, ranges)
	if err != nil || ps != DMALogPageSize {
		t.Fatalf("start: page size %d, %v; want %d", ps, err, DMALogPageSize)
	}
	if _, err := c.DMALoggingStart(4096, nil); !errors.Is(err, unix.EBUSY) {
		t.Fatalf("a second START: %v, want EBUSY", err)
	}
	dev.log.Mark(0x1000, 1)        // page 1
	dev.log.Mark(0x3fff, 2)        // pages 3 and 4: 4 is... 0x4000 is page 4, still inside 0x40000
	dev.log.Mark(0x80000, 0x1000)  // outside both ranges
	dev.log.Mark(0x1ff000, 0x2000) // page 0x1ff inside, 0x200 outside

	bm, err := c.DMALoggingReport(0, 0x40000, 4096)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := set(bm), []uint64{1, 3, 4}; !equalBits(got, want) {
		t.Fatalf("report of [0, 256K) in 4K pages: bits %v, want %v", got, want)
	}
	if bm, _ := c.DMALoggingReport(0, 0x40000, 4096); len(set(bm)) != 0 {
		t.Fatalf("a second report found %v: the first did not clear", set(bm))
	}
	// 64 KiB units: 0x1ff000 is in unit (0x1ff000-0x100000)/0x10000 = 15.
	bm, err = c.DMALoggingReport(0x100000, 0x100000, 0x10000)
	if err != nil || !equalBits(set(bm), []uint64{15}) || len(bm) != 1 {
		t.Fatalf("report in 64K units: %v (%d words), %v", set(bm), len(bm), err)
	}
	// A report that only partly covers a page leaves it marked.
	dev.log.Mark(0x2000, 4096)
	if bm, err := c.DMALoggingReport(0x2800, 0x1000, 4096); err != nil || !equalBits(set(bm), []uint64{0}) {
		t.Fatalf("partial report: %v, %v", set(bm), err)
	}
	if bm, err := c.DMALoggingReport(0x2000, 0x1000, 4096); err != nil || !equalBits(set(bm), []uint64{0}) {
		t.Fatalf("the partly reported page was cleared: %v, %v", set(bm), err)
	}
	if err := c.DMALoggingStop(); err != nil {
		t.Fatal(err)
	}
	if dev.log.Logging() {
		t.Fatal("logging after STOP")
	}
	if _, err := c.DMALoggingReport(0, 0x40000, 4096); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("report after STOP: %v, want EINVAL", err)
	}
	if len(ts.logs.withMessage(t, "dma logging started")) != 1 || len(ts.logs.withMessage(t, "dma logging stopped")) != 1 {
		t.Fatal("no log lines for start and stop")
	}
}

// TestDMALoggingRefused: malformed START and REPORT requests get errors
// and leave the log as it was; a device without a log answers ENOTSUP; a
// client that leaves stops the logging it started.
func TestDMALoggingRefused(t *testing.T) {
	ts, dev := startLogServer(t, 4096)
	c := dial(t, ts.path)
	for _, rs := range [][]DMALoggingRange{
		{{IOVA: 0x1000, Length: 0}},
		{{IOVA: ^uint64(0) - 10, Length: 0x1000}},
		{{IOVA: 0, Length: 0x2000}, {IOVA: 0x1000, Length: 0x1000}},
		make([]DMALoggingRange, dmaLogMaxRanges+1),
	} {
		if _, err := c.DMALoggingStart(4096, rs); err == nil {
			t.Errorf("start with %d ranges %v: accepted", len(rs), rs[:min(2, len(rs))])
		}
		if dev.log.Logging() {
			t.Fatal("a refused START started logging")
		}
	}
	if _, err := c.DMALoggingStart(4096, nil); err != nil {
		t.Fatal(err)
	}
	dev.log.Mark(0x5000, 1)
	for _, r := range []DMALoggingReport{
		{IOVA: 0, Length: 0x10000, PageSize: 512},                   // below 4 KiB
		{IOVA: 0, Length: 0x10000, PageSize: 0x3000},                // not a power of two
		{IOVA: 0, Length: 4096 * 8 * 4096 * 2, PageSize: 4096},      // a bitmap beyond max_data_xfer_size
		{IOVA: ^uint64(0) - 0xfff, Length: 0x10000, PageSize: 4096}, // wraps
	} {
		if _, err := c.DMALoggingReport(r.IOVA, r.Length, r.PageSize); err == nil {
			t.Errorf("report %+v: accepted", r)
		}
	}
	if bm, err := c.DMALoggingReport(0, 0x10000, 4096); err != nil || !equalBits(set(bm), []uint64{5}) {
		t.Fatalf("after refused reports: %v, %v", set(bm), err)
	}
	c.Close()
	c2 := dial(t, ts.path) // served once the first client is gone
	if _, err := c2.DMALoggingStart(4096, nil); err != nil {
		t.Fatalf("START after the first client left (its logging should have stopped): %v", err)
	}

	plain := startServer(t, 4096)
	pc := dial(t, plain.path)
	if err := pc.ProbeFeature(FeatureDMALoggingStart); !errors.Is(err, unix.ENOTSUP) {
		t.Fatalf("probe on a device without a log: %v, want ENOTSUP", err)
	}
}

// TestDMALogMarkConcurrent: marks from several goroutines while the log
// is reported lose nothing (run with -race).
func TestDMALogMarkConcurrent(t *testing.T) {
	var l DMALog
	if err := l.start(nil); err != nil {
		t.Fatal(err)
	}
	const writers, pages = 4, 256
	done := make(chan struct{})
	for w := range writers {
		go func() {
			defer func() { done <- struct{}{} }()
			for p := range uint64(pages) {
				l.Mark(uint64(w)*pages*DMALogPageSize+p*DMALogPageSize, 1)
			}
		}()
	}
	seen := map[uint64]bool{}
	collect := func() {
		bm, err := l.report(0, writers*pages*DMALogPageSize, DMALogPageSize, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		for _, b := range set(bm) {
			seen[b] = true
		}
	}
	for range writers {
		collect()
		<-done
	}
	collect()
	if len(seen) != writers*pages {
		t.Fatalf("reported %d pages, want %d", len(seen), writers*pages)
	}
}
