package dirty

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
)

func BenchmarkHashPage(b *testing.B) {
	mem := randMem(b, 1, 30)
	b.SetBytes(PageSize)
	var sink uint64
	for b.Loop() {
		sink += HashPage(mem)
	}
	_ = sink
}

// BenchmarkCopyHashPage is the per-page cost Scan pays for a page it must
// hash: a copy into the worker's buffer, then the hash.
func BenchmarkCopyHashPage(b *testing.B) {
	mem := randMem(b, 1, 30)
	buf := make([]byte, PageSize)
	b.SetBytes(PageSize)
	var sink uint64
	for b.Loop() {
		copyPage(buf, mem)
		sink += HashPage(buf)
	}
	_ = sink
}

// BenchmarkScan scans 64 MiB with 0%, 5% or 100% of its pages rewritten
// (whole-page rewrites, which the sampling pre-filter catches), and 100% of
// pages changed in one byte no sample covers (every page hashed), on one
// worker and on all. MB/s is memory scanned per second.
func BenchmarkScan(b *testing.B) {
	const pages = 64 << 20 / PageSize
	base := randMem(b, pages, 31)
	cases := []struct {
		name     string
		fraction float64
		byteOnly bool
	}{
		{"dirty=0%", 0, false},
		{"dirty=5%", 0.05, false},
		{"dirty=100%", 1, false},
		{"dirty=100%-unsampled", 1, true},
	}
	for _, c := range cases {
		for _, workers := range []int{1, runtime.GOMAXPROCS(0)} {
			b.Run(fmt.Sprintf("%s/workers=%d", c.name, workers), func(b *testing.B) {
				mem := make([]byte, len(base))
				copy(mem, base)
				tr := newTracker(b, mem, Options{Workers: workers})
				recordAll(b, tr)
				r := rand.New(rand.NewPCG(32, 32))
				for p := range pages {
					if r.Float64() >= c.fraction {
						continue
					}
					pg := mem[p*PageSize : (p+1)*PageSize]
					if c.byteOnly {
						pg[offsetIn(b, tr, false, r)] ^= 1
						continue
					}
					for i := range pg {
						pg[i] = byte(r.Uint32())
					}
				}
				b.SetBytes(int64(len(mem)))
				var res ScanResult
				for b.Loop() {
					var err error
					if res, err = tr.Scan(context.Background()); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(len(res.Dirty)), "dirty/op")
				b.ReportMetric(float64(res.PagesHashed), "hashed/op")
			})
		}
	}
}

func BenchmarkRecordAll(b *testing.B) {
	const pages = 64 << 20 / PageSize
	mem := randMem(b, pages, 33)
	for _, workers := range []int{1, runtime.GOMAXPROCS(0)} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			tr := newTracker(b, mem, Options{Workers: workers})
			b.SetBytes(int64(len(mem)))
			for b.Loop() {
				recordAll(b, tr)
			}
		})
	}
}

func BenchmarkMarkWritten(b *testing.B) {
	tr := newTracker(b, make([]byte, 64<<20), Options{})
	b.SetBytes(1 << 20)
	i := uint64(0)
	for b.Loop() {
		tr.MarkWritten(i%(63<<20)+100, 1<<20) // a 1 MiB command write
		i += 1 << 20
	}
}

// BenchmarkHashMem hashes 64 MiB page by page, as Scan does (copy into a
// page buffer, then hash), and, for comparison only, in place.
func BenchmarkHashMem(b *testing.B) {
	mem := randMem(b, 64<<20/PageSize, 34)
	buf := make([]byte, PageSize)
	var sink uint64
	b.Run("copy", func(b *testing.B) {
		b.SetBytes(int64(len(mem)))
		for b.Loop() {
			for off := 0; off < len(mem); off += PageSize {
				copyPage(buf, mem[off:off+PageSize])
				sink += HashPage(buf)
			}
		}
	})
	b.Run("inplace", func(b *testing.B) {
		b.SetBytes(int64(len(mem)))
		for b.Loop() {
			for off := 0; off < len(mem); off += PageSize {
				sink += HashPage(mem[off : off+PageSize])
			}
		}
	})
	_ = sink
}

// BenchmarkScanCopyVsFrozen compares Scan (copy, then hash) with
// ScanFrozen (hash in place) on the same clean 64 MiB, side by side.
func BenchmarkScanCopyVsFrozen(b *testing.B) {
	const pages = 64 << 20 / PageSize
	mem := randMem(b, pages, 33)
	tr := newTracker(b, mem, Options{})
	recordAll(b, tr)
	for _, c := range []struct {
		name string
		scan func(context.Context) (ScanResult, error)
	}{{"copy", tr.Scan}, {"frozen", tr.ScanFrozen}} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(int64(len(mem)))
			for b.Loop() {
				if res, err := c.scan(context.Background()); err != nil || len(res.Dirty) != 0 {
					b.Fatalf("%v, %d dirty", err, len(res.Dirty))
				}
			}
		})
	}
}
