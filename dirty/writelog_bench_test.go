//go:build linux

package dirty

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/internal/uffdwp"
)

// BenchmarkScanFrozenLogged is the stop phase's scan with a real write log
// (uffd-wp in this process) over a memfd of 1 or 4 GiB mapped twice, as
// the in-process simulator maps the aperture (gmigd's mapping and the
// guest's), every page present, with both mappings logged (as before
// precopy left gmigd's own out) or only the guest's (logged=guest, as
// now); between scans the "guest" stores the same bytes into 5 or 4096
// pages (so they are hashed, and clean). The log's read alone (Peek, what
// frozen scans use) is beside the scans. ms/op should follow the written
// pages; what grows with the size is the kernel's page-table walk, per
// mapping logged. cpu-ms/op is the process's CPU time per scan (all
// workers), which a shared machine's load does not inflate as it does
// ms/op.
func BenchmarkScanFrozenLogged(b *testing.B) {
	for _, size := range []int{1 << 30, 4 << 30} {
		for _, c := range []struct {
			logged  string
			written int
		}{{"both", 5}, {"guest", 5}, {"both", 4096}, {"guest", 4096}} {
			written := c.written
			b.Run(fmt.Sprintf("mem=%dG/logged=%s/written=%d", size>>30, c.logged, written), func(b *testing.B) {
				mem, guest, l := loggedMemfd(b, size, c.logged == "guest")
				tr := newTracker(b, mem, Options{})
				if err := tr.UseWriteLog(l); err != nil {
					b.Fatal(err)
				}
				recordAll(b, tr)
				for _, c := range []struct {
					name string
					scan func() (hashed int, err error)
				}{
					{"ScanFrozen", func() (int, error) {
						r, err := tr.ScanFrozen(context.Background())
						return r.PagesHashed, err
					}},
					{"ScanFrozenStream", func() (int, error) {
						r, err := tr.ScanFrozenStream(context.Background(), 0, func(ScanChunk) error { return nil })
						return r.PagesHashed, err
					}},
					{"Peek", func() (int, error) { _, err := l.Peek(nil); return 0, err }},
				} {
					b.Run(c.name, func(b *testing.B) {
						hashed := 0
						cpu0 := processCPU(b)
						for b.Loop() {
							b.StopTimer()
							for j := range written {
								guest[j*PageSize] ^= benchZero // a store of the same bytes
							}
							b.StartTimer()
							var err error
							if hashed, err = c.scan(); err != nil {
								b.Fatal(err)
							}
						}
						b.ReportMetric(float64(b.Elapsed())/float64(b.N)/float64(time.Millisecond), "ms/op")
						b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N)/float64(time.Millisecond), "cpu-ms/op")
						b.ReportMetric(float64(hashed), "hashed/op")
					})
				}
			})
		}
	}
}

// loggedMemfd maps a memfd of size bytes twice, stores into every page
// through the second mapping (guest) and opens a write log over both, or
// with guestOnly over the second only (the first left out: Exclude).
func loggedMemfd(b *testing.B, size int, guestOnly bool) (mem, guest []byte, l *uffdwp.Log) {
	b.Helper()
	fd, err := unix.MemfdCreate("dirty-bench", unix.MFD_CLOEXEC)
	if err != nil {
		b.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "dirty-bench")
	b.Cleanup(func() { f.Close() })
	if err := f.Truncate(int64(size)); err != nil {
		b.Fatal(err)
	}
	for _, m := range []*[]byte{&mem, &guest} {
		if *m, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { unix.Munmap(*m) })
	}
	for p := 0; p < size; p += PageSize {
		guest[p] = byte(p >> 12)
		_ = mem[p]
	}
	if l, err = uffdwp.Open(0, f); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	if guestOnly {
		if n, err := l.Exclude(mem); err != nil || n != 1 {
			b.Fatalf("Exclude = %d, %v; want 1 mapping left out", n, err)
		}
	}
	return mem, guest, l
}

// processCPU is the CPU time (user and system) this process has used: on
// a shared machine the walk's cost shows there whatever the load, where
// the wall time also counts waiting for a core.
func processCPU(b *testing.B) time.Duration {
	b.Helper()
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchZero is a store the compiler cannot drop: x ^= benchZero writes x
// unchanged.
var benchZero byte
