//go:build linux

package uffdwp

import (
	"os"
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
