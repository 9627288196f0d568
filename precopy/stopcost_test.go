package precopy

import (
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestProcCostCounts: touching fresh pages shows as minor faults and a
// forced GC as a cycle between two readings.
func TestProcCostCounts(t *testing.T) {
	const pages = 1024
	mem, err := unix.Mmap(-1, 0, pages*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	if err := unix.Madvise(mem, unix.MADV_NOHUGEPAGE); err != nil { // a fault per 4 KiB page
		t.Fatal(err)
	}
	before := readProcCost()
	for i := 0; i < len(mem); i += 4096 {
		mem[i] = 1
	}
	runtime.GC()
	if c := readProcCost().since(before); c.minorFaults < pages || c.gcs < 1 {
		t.Fatalf("cost %+v after touching %d fresh pages and a GC; want ≥ %d minor faults and ≥ 1 GC", c, pages, pages)
	}
}
