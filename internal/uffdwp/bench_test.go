//go:build linux

package uffdwp

import (
	"fmt"
	"os"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkFirstWrite is what the log costs a writer: one byte stored into
// each page of a 16 MiB shared mapping, armed (each store takes the
// write-protect fault the kernel resolves itself) or not. ns/op is per
// page; the difference is the price of the first write to a page after
// Arm, paid once per page per arm.
func BenchmarkFirstWrite(b *testing.B) {
	const pages = 4096
	fd, err := unix.MemfdCreate("uffdwp-bench", unix.MFD_CLOEXEC)
	if err != nil {
		b.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "uffdwp-bench")
	defer f.Close()
	if err := f.Truncate(pages * PageSize); err != nil {
		b.Fatal(err)
	}
	mem, err := unix.Mmap(fd, 0, pages*PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		b.Fatal(err)
	}
	defer unix.Munmap(mem)
	for p := range pages {
		mem[p*PageSize] = 1
	}
	l, err := Open(0, f)
	if err != nil {
		b.Fatal(err)
	}
	defer l.Close()
	for _, armed := range []bool{false, true} {
		name := "plain"
		if armed {
			name = "armed"
		}
		b.Run(name, func(b *testing.B) {
			for i := 0; i < b.N; i += pages {
				if armed {
					b.StopTimer()
					if err := l.Arm(); err != nil {
						b.Fatal(err)
					}
					b.StartTimer()
				}
				for p := 0; p < pages && i+p < b.N; p++ {
					mem[p*PageSize+i%PageSize]++
				}
			}
		})
	}
}

// BenchmarkRead is the read of the log at a migration's stop: a memfd of
// 1 or 4 GiB mapped once, every page present, 5 pages written between
// reads; Written (re-protect) against Peek, walked by one goroutine and
// by GOMAXPROCS. ms/op is per read.
func BenchmarkRead(b *testing.B) {
	for _, size := range []int{1 << 30, 4 << 30} {
		fd, err := unix.MemfdCreate("uffdwp-bench", unix.MFD_CLOEXEC)
		if err != nil {
			b.Fatal(err)
		}
		f := os.NewFile(uintptr(fd), "uffdwp-bench")
		if err := f.Truncate(int64(size)); err != nil {
			b.Fatal(err)
		}
		mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
		if err != nil {
			b.Fatal(err)
		}
		for p := 0; p < size; p += PageSize {
			mem[p] = 1
		}
		l, err := Open(0, f)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Arm(); err != nil {
			b.Fatal(err)
		}
		for _, workers := range []int{1, runtime.GOMAXPROCS(0)} {
			l.workers, l.pieces = workers, splitRanges(l.ranges, workers, minPiece)
			for _, read := range []struct {
				name string
				fn   func([]int) ([]int, error)
			}{{"Written", l.Written}, {"Peek", l.Peek}} {
				b.Run(fmt.Sprintf("mem=%dG/workers=%d/%s", size>>30, workers, read.name), func(b *testing.B) {
					var buf []int
					i := 0
					for b.Loop() {
						b.StopTimer()
						for j := range 5 {
							mem[(i*5+j)*PageSize%size]++
						}
						i++
						b.StartTimer()
						if buf, err = read.fn(buf[:0]); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.Elapsed())/float64(b.N)/1e6, "ms/op")
				})
			}
		}
		l.Close()
		unix.Munmap(mem)
		f.Close()
	}
}
