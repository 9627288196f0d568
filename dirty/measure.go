package dirty

import (
	"context"
	"runtime"
	"time"
)

// measureMin is the least time a rate measurement spends, so small
// memories still give a stable rate.
const measureMin = 100 * time.Millisecond

// MeasureHashRate reports how many bytes a second workers goroutines hash
// mem at, page by page on the path Scan takes for a page it must hash (copy
// into a page buffer, xxhash64). It makes whole passes over mem until at
// least 100 ms have passed. Trailing bytes short of a page are ignored;
// workers <= 0 means one worker per GOMAXPROCS.
func MeasureHashRate(mem []byte, workers int) (bytesPerSec float64) {
	return measureRate(mem, workers, func(t *Tracker, p int, buf []byte) uint64 {
		copyPage(buf, t.page(p))
		return HashPage(buf)
	})
}

// MeasureScanRate is MeasureHashRate on the path ScanFrozen takes: pages
// hashed where they are, without the copy, on workers goroutines. It is
// the rate the final scan of a stop phase can reach on this machine.
func MeasureScanRate(mem []byte, workers int) (bytesPerSec float64) {
	return measureRate(mem, workers, func(t *Tracker, p int, _ []byte) uint64 {
		return HashPage(t.page(p))
	})
}

// measureRate makes whole passes of hash over mem's pages on workers
// goroutines until measureMin has passed, and returns the bytes a second.
func measureRate(mem []byte, workers int, hash func(t *Tracker, p int, buf []byte) uint64) float64 {
	pages := len(mem) / PageSize
	if pages == 0 {
		return 0
	}
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	t := &Tracker{mem: mem, pages: pages, workers: workers}
	t.bufs.New = func() any { return new([PageSize]byte) }
	sink := make([]uint64, t.workers*8) // one cache line per worker
	start := time.Now()
	var bytes float64
	for bytes == 0 || time.Since(start) < measureMin {
		_ = t.forChunks(context.Background(), pages, scanChunk, t.workers, func(w, lo, hi int, buf []byte) {
			for p := lo; p < hi; p++ {
				sink[w*8] += hash(t, p, buf)
			}
		})
		bytes += float64(pages * PageSize)
	}
	return bytes / time.Since(start).Seconds()
}
