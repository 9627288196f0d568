//go:build linux

package uffdwp

import (
	"errors"
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestWritesInChild: one-byte stores anywhere in a page, a store that
// puts the old value back (A→B→A), pages populated and pages never
// touched before arming: the log reports exactly the pages stored to,
// which include every page the oracle sees changed, and re-protects them.
func TestWritesInChild(t *testing.T) {
	c := startChild(t)
	l := openChild(t, c)
	if err := l.Arm(); err != nil {
		t.Fatal(err)
	}
	before := c.snapshot()
	c.do(t, "w %d 1", 0)                     // page 0, first byte
	c.do(t, "w %d 2", 5*PageSize+PageSize-1) // page 5, last byte
	aba := 10*PageSize + 2000                // page 10: A→B→A
	c.do(t, "w %d %d", aba, c.mem[aba]^0xff)
	c.do(t, "w %d %d", aba, before[aba])
	c.do(t, "w %d 3", 40*PageSize+17)        // never touched before arming
	c.do(t, "w %d 4", childPages*PageSize-1) // the last byte, never touched
	got, err := l.Written(nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 5, 10, 40, 63}; !slices.Equal(got, want) {
		t.Fatalf("Written = %v, want %v", got, want)
	}
	ch := changed(before, c.snapshot())
	for _, p := range ch {
		if !slices.Contains(got, p) {
			t.Fatalf("page %d changed but was not logged (changed %v, logged %v)", p, ch, got)
		}
	}
	if got, err := l.Written(nil); err != nil || len(got) != 0 {
		t.Fatalf("Written with no stores = %v, %v; want none", got, err)
	}
	c.do(t, "w %d 5", 40*PageSize+18)
	if got, err := l.Written(nil); err != nil || !slices.Equal(got, []int{40}) {
		t.Fatalf("Written after storing to page 40 again = %v, %v; want [40]", got, err)
	}
}

// TestRacingWriterInChild: the child stores at random while the log is
// armed and read in rounds, as a migration's rounds would: a copy taken
// after Arm is brought up to date each round by copying only the pages
// Written returns (re-protect first, then read). Once the writer stops,
// one last round must leave the copy equal to the memory: a write the log
// missed would stay stale in it.
func TestRacingWriterInChild(t *testing.T) {
	c := startChild(t)
	l := openChild(t, c)
	c.do(t, "race %d %d", 16, 48) // populated and never-touched pages alike
	if err := l.Arm(); err != nil {
		t.Fatal(err)
	}
	dest := c.snapshot()
	seen := map[int]bool{}
	round := func() {
		got, err := l.Written(nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range got {
			if p < 16 || p >= 48 {
				t.Fatalf("page %d logged, but nothing stores there", p)
			}
			copy(dest[p*PageSize:(p+1)*PageSize], c.mem[p*PageSize:])
			seen[p] = true
		}
	}
	for range 50 {
		round()
	}
	c.do(t, "stop")
	round()
	if stale := changed(dest, c.snapshot()); len(stale) > 0 {
		t.Fatalf("pages %v changed but were never logged after their last copy", stale)
	}
	if len(seen) < 8 {
		t.Fatalf("the racing writer was logged on only %d pages", len(seen))
	}
}

// TestNewMappingLost: a mapping of the file made after Open was never
// armed, so the log says it is lost rather than miss its writes.
func TestNewMappingLost(t *testing.T) {
	c := startChild(t)
	l := openChild(t, c)
	if err := l.Arm(); err != nil {
		t.Fatal(err)
	}
	c.do(t, "map")
	if _, err := l.Written(nil); !errors.Is(err, ErrLost) {
		t.Fatalf("Written after a new mapping = %v, want ErrLost", err)
	}
}

// TestRegistrationLost: a registered mapping replaced in place (unmapped
// and mapped again at the same address) is no longer registered:
// PM_SCAN_CHECK_WPASYNC's refusal comes back as ErrLost.
func TestRegistrationLost(t *testing.T) {
	fd, err := unix.MemfdCreate("uffdwp-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "uffdwp-test")
	defer f.Close()
	if err := f.Truncate(4 * PageSize); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(fd, 0, 4*PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { unix.Munmap(mem) }()
	l, err := Open(0, f)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if err := l.Arm(); err != nil {
		t.Fatal(err)
	}
	if err := remapInPlace(mem, fd); err != nil {
		t.Fatal(err)
	}
	mem[0] = 1
	if _, err := l.Written(nil); !errors.Is(err, ErrLost) {
		t.Fatalf("Written after the mapping was replaced = %v, want ErrLost", err)
	}
}

// TestNoMapping: a file the process does not map is refused before
// anything is injected into it.
func TestNoMapping(t *testing.T) {
	c := startChild(t)
	f, err := os.CreateTemp(t.TempDir(), "unmapped")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := Open(c.pid, f); !errors.Is(err, ErrNoMapping) {
		t.Fatalf("Open = %v, want ErrNoMapping", err)
	}
}
