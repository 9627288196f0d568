package memprobe

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestResident: untouched pages are not resident, written ones are, and
// pages given back with MADV_DONTNEED are not again.
func TestResident(t *testing.T) {
	page := unix.Getpagesize()
	mem, err := unix.Mmap(-1, 0, 4*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	if n, err := Resident(mem); err != nil || n != 0 {
		t.Fatalf("fresh mapping: %d resident (%v), want 0", n, err)
	}
	mem[0], mem[2*page+5], mem[3*page] = 1, 1, 1
	if n, err := Resident(mem); err != nil || n != 3 {
		t.Fatalf("after writing 3 pages: %d resident (%v), want 3", n, err)
	}
	if err := unix.Madvise(mem[2*page:], unix.MADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	if n, err := Resident(mem); err != nil || n != 1 {
		t.Fatalf("after giving 2 back: %d resident (%v), want 1", n, err)
	}
	if n, err := Resident(nil); err != nil || n != 0 {
		t.Fatalf("empty: %d, %v", n, err)
	}
}
