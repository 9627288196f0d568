package vfio

import (
	"bytes"
	"errors"
	"sync"
	"testing"
)

const (
	pg       = 4096
	guestRAM = 64 * pg
)

func TestDMAReadWriteThroughMemfd(t *testing.T) {
	f := memfd(t, guestRAM)
	if _, err := f.WriteAt([]byte("guest bytes"), 5*pg+10); err != nil {
		t.Fatal(err)
	}
	tab := NewDMATable()
	defer tab.UnmapAll()
	// Guest RAM at IOVA 1 MiB, mapped from file offset 4 pages.
	if err := tab.Map(DMARegion{IOVA: 1 << 20, Size: 32 * pg, Offset: 4 * pg, Prot: DMAProtRead | DMAProtWrite, File: f}); err != nil {
		t.Fatal(err)
	}
	f.Close() // the table does not need the descriptor

	got := make([]byte, 11)
	if err := tab.ReadAt(got, 1<<20+pg+10); err != nil {
		t.Fatal(err)
	}
	if string(got) != "guest bytes" {
		t.Fatalf("read %q", got)
	}
	if err := tab.WriteAt([]byte("device"), 1<<20+31*pg); err != nil {
		t.Fatal(err)
	}
	back := make([]byte, 6)
	if err := tab.ReadAt(back, 1<<20+31*pg); err != nil || string(back) != "device" {
		t.Fatalf("read back %q, %v", back, err)
	}
	if err := tab.ReadAt(make([]byte, 2), 1<<20+32*pg-1); !errors.Is(err, ErrNotMapped) {
		t.Fatalf("read past end: %v, want ErrNotMapped", err)
	}
	if err := tab.ReadAt(make([]byte, 1), 1<<20-1); !errors.Is(err, ErrNotMapped) {
		t.Fatalf("read below: %v, want ErrNotMapped", err)
	}
	if err := tab.Unmap(1<<20, 32*pg); err != nil {
		t.Fatal(err)
	}
	if err := tab.ReadAt(got, 1<<20+pg+10); !errors.Is(err, ErrNotMapped) {
		t.Fatalf("read after unmap: %v, want ErrNotMapped", err)
	}
}

func TestDMAWriteVisibleInFile(t *testing.T) {
	f := memfd(t, guestRAM)
	tab := NewDMATable()
	defer tab.UnmapAll()
	// An offset that is not page aligned is accepted.
	if err := tab.Map(DMARegion{IOVA: 0x10000, Size: 8 * pg, Offset: pg + 100, Prot: DMAProtRead | DMAProtWrite, File: f}); err != nil {
		t.Fatal(err)
	}
	if err := tab.WriteAt([]byte{1, 2, 3}, 0x10000); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 3)
	if _, err := f.ReadAt(got, pg+100); err != nil || !bytes.Equal(got, []byte{1, 2, 3}) {
		t.Fatalf("file holds %v, %v", got, err)
	}
}

func TestDMASpansAdjacentRegions(t *testing.T) {
	a, b := memfd(t, 4*pg), memfd(t, 4*pg)
	tab := NewDMATable()
	defer tab.UnmapAll()
	rw := DMAProtRead | DMAProtWrite
	if err := tab.Map(DMARegion{IOVA: 4 * pg, Size: 4 * pg, Prot: rw, File: b}); err != nil {
		t.Fatal(err)
	}
	if err := tab.Map(DMARegion{IOVA: 0, Size: 4 * pg, Prot: rw, File: a}); err != nil {
		t.Fatal(err)
	}
	src := bytes.Repeat([]byte{0x5a}, 2*pg)
	if err := tab.WriteAt(src, 3*pg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 2*pg)
	if err := tab.ReadAt(got, 3*pg); err != nil || !bytes.Equal(got, src) {
		t.Fatalf("spanning read: %v", err)
	}
	tail := make([]byte, pg)
	if _, err := b.ReadAt(tail, 0); err != nil || !bytes.Equal(tail, src[pg:]) {
		t.Fatalf("second file not written: %v", err)
	}
	// A hole between regions fails the whole access, writing nothing.
	if err := tab.Unmap(4*pg, 4*pg); err != nil {
		t.Fatal(err)
	}
	if err := tab.Map(DMARegion{IOVA: 5 * pg, Size: 3 * pg, Prot: rw, File: b}); err != nil {
		t.Fatal(err)
	}
	if err := tab.WriteAt(make([]byte, 2*pg), 3*pg); !errors.Is(err, ErrNotMapped) {
		t.Fatalf("write over hole: %v, want ErrNotMapped", err)
	}
	if err := tab.ReadAt(got[:pg], 3*pg); err != nil || !bytes.Equal(got[:pg], src[:pg]) {
		t.Fatalf("failed write changed memory: %v", err)
	}
}

func TestDMAMapRefusals(t *testing.T) {
	f := memfd(t, guestRAM)
	tab := NewDMATable()
	defer tab.UnmapAll()
	rw := DMAProtRead | DMAProtWrite
	if err := tab.Map(DMARegion{IOVA: 16 * pg, Size: 16 * pg, Prot: rw, File: f}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		r    DMARegion
		want error
	}{
		{"overlap start", DMARegion{IOVA: 8 * pg, Size: 9 * pg, Prot: rw}, ErrOverlap},
		{"overlap inside", DMARegion{IOVA: 20 * pg, Size: pg, Prot: rw, File: f}, ErrOverlap},
		{"overlap end", DMARegion{IOVA: 31 * pg, Size: 2 * pg, Prot: rw}, ErrOverlap},
		{"zero size", DMARegion{IOVA: 64 * pg, Prot: rw}, ErrInvalid},
		{"wraps", DMARegion{IOVA: ^uint64(0) - pg + 1, Size: 2 * pg, Prot: rw}, ErrInvalid},
		{"unknown prot", DMARegion{IOVA: 64 * pg, Size: pg, Prot: 4}, ErrInvalid},
		{"beyond file", DMARegion{IOVA: 64 * pg, Size: guestRAM, Offset: pg, Prot: rw, File: f}, ErrInvalid},
	} {
		if err := tab.Map(c.r); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if n := len(tab.Regions()); n != 1 {
		t.Fatalf("%d regions after refusals, want 1", n)
	}
	// Unmap must not split a mapping, and must find one.
	if err := tab.Unmap(16*pg, pg); !errors.Is(err, ErrInvalid) {
		t.Errorf("partial unmap: %v, want ErrInvalid", err)
	}
	if err := tab.Unmap(64*pg, pg); !errors.Is(err, ErrNotMapped) {
		t.Errorf("unmap of nothing: %v, want ErrNotMapped", err)
	}
	// Adjacent, non-overlapping maps are fine.
	if err := tab.Map(DMARegion{IOVA: 32 * pg, Size: pg, Prot: rw}); err != nil {
		t.Errorf("adjacent map: %v", err)
	}
	// An unmap range covering whole mappings removes them all.
	if err := tab.Unmap(0, 64*pg); err != nil || len(tab.Regions()) != 0 {
		t.Errorf("covering unmap: %v, %d left", err, len(tab.Regions()))
	}
}

func TestDMAFdlessAndReadOnly(t *testing.T) {
	f := memfd(t, guestRAM)
	tab := NewDMATable()
	defer tab.UnmapAll()
	// QEMU maps ROM/BIOS ranges read-only and without descriptors.
	if err := tab.Map(DMARegion{IOVA: 0xfffc0000, Size: 0x40000, Prot: DMAProtRead}); err != nil {
		t.Fatalf("fd-less map: %v", err)
	}
	if err := tab.ReadAt(make([]byte, 4), 0xfffc0000); !errors.Is(err, ErrNoFD) {
		t.Fatalf("fd-less read: %v, want ErrNoFD", err)
	}
	if err := tab.Map(DMARegion{IOVA: 0, Size: 4 * pg, Prot: DMAProtRead, File: f}); err != nil {
		t.Fatal(err)
	}
	if err := tab.ReadAt(make([]byte, 4), 0); err != nil {
		t.Fatalf("read-only read: %v", err)
	}
	if err := tab.WriteAt([]byte{1}, 0); !errors.Is(err, ErrPermission) {
		t.Fatalf("write to read-only: %v, want ErrPermission", err)
	}
	if err := tab.Map(DMARegion{IOVA: 4 * pg, Size: 4 * pg, Prot: DMAProtWrite, File: f}); err != nil {
		t.Fatal(err)
	}
	if err := tab.ReadAt(make([]byte, 4), 4*pg); !errors.Is(err, ErrPermission) {
		t.Fatalf("read of write-only: %v, want ErrPermission", err)
	}
	if err := tab.Unmap(0xfffc0000, 0x40000); err != nil {
		t.Fatalf("fd-less unmap: %v", err)
	}
}

// TestDMAFaultIsAnError truncates the file under a mapping: the copy faults
// (SIGBUS) and must come back as ErrFault, not crash the process.
func TestDMAFaultIsAnError(t *testing.T) {
	f := memfd(t, 4*pg)
	tab := NewDMATable()
	defer tab.UnmapAll()
	if err := tab.Map(DMARegion{IOVA: 0, Size: 4 * pg, Prot: DMAProtRead | DMAProtWrite, File: f}); err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(pg); err != nil {
		t.Fatal(err)
	}
	if err := tab.ReadAt(make([]byte, 8), 2*pg); !errors.Is(err, ErrFault) {
		t.Fatalf("read past truncation: %v, want ErrFault", err)
	}
	if err := tab.ReadAt(make([]byte, 8), 0); err != nil {
		t.Fatalf("read inside file: %v", err)
	}
}

// TestDMAConcurrentAccess races engine-style copies against map/unmap
// churn; run with -race.
func TestDMAConcurrentAccess(t *testing.T) {
	f := memfd(t, guestRAM)
	tab := NewDMATable()
	defer tab.UnmapAll()
	rw := DMAProtRead | DMAProtWrite
	if err := tab.Map(DMARegion{IOVA: 0, Size: 32 * pg, Prot: rw, File: f}); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 3*pg)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				iova := uint64((i*7+w)%29) * pg
				if err := tab.WriteAt(buf, iova); err != nil {
					t.Errorf("write: %v", err)
					return
				}
				// The churned window may or may not be mapped.
				if err := tab.ReadAt(buf[:pg], 40*pg); err != nil && !errors.Is(err, ErrNotMapped) {
					t.Errorf("read churned window: %v", err)
					return
				}
			}
		}()
	}
	for range 500 {
		if err := tab.Map(DMARegion{IOVA: 40 * pg, Size: 8 * pg, Offset: 32 * pg, Prot: rw, File: f}); err != nil {
			t.Fatal(err)
		}
		if err := tab.Unmap(40*pg, 8*pg); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
}
