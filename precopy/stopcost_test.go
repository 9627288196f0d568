package precopy

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/gmig-dev/gmig/internal/migtest"
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

// TestStopProfile: with StopProfileEnv set, a stop phase leaves a CPU
// profile of this process in the directory (gzip-compressed protobuf, as
// pprof writes); a second profile asked for while one runs (source and
// destination in one process, as here) is skipped and ends nothing;
// without the variable, nothing is written.
func TestStopProfile(t *testing.T) {
	dir := t.TempDir()
	t.Setenv(StopProfileEnv, dir)
	end := startStopProfile(migtest.Log, "source")
	endSecond := startStopProfile(migtest.Log, "destination")
	sum := 0
	for i := range 2_000_000 { // some CPU to sample
		sum += i * i
	}
	endSecond()
	end()
	files, err := filepath.Glob(filepath.Join(dir, "*.pprof"))
	if err != nil || len(files) != 1 || !strings.HasPrefix(filepath.Base(files[0]), "source-") {
		t.Fatalf("profiles %v (%v), want one of the source (sum %d)", files, err, sum)
	}
	b, err := os.ReadFile(files[0])
	if err != nil || len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("profile %s: %d bytes (%v), want a gzip stream", files[0], len(b), err)
	}
	t.Setenv(StopProfileEnv, "")
	startStopProfile(migtest.Log, "source")()
	if files, _ := filepath.Glob(filepath.Join(dir, "*.pprof")); len(files) != 1 {
		t.Fatalf("%d profiles after a stop phase without %s, want the 1 of before", len(files), StopProfileEnv)
	}
}
