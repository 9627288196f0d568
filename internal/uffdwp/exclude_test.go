//go:build linux

package uffdwp

import (
	"errors"
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestExcludeOwnMapping: a memfd this process maps twice, as gmigd and
// the in-process guest map a vGPU's memory. With the first mapping left
// out, the log covers one mapping: a store through it is not reported
// (its writer marks its own writes), a store through the other is, and a
// read does not take the mapping left out for one never armed.
func TestExcludeOwnMapping(t *testing.T) {
	const pages = 16
	fd, err := unix.MemfdCreate("uffdwp-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "uffdwp-test")
	defer f.Close()
	if err := f.Truncate(pages * PageSize); err != nil {
		t.Fatal(err)
	}
	var maps [2][]byte // [0] the engine's, [1] the guest's
	for i := range maps {
		if maps[i], err = unix.Mmap(fd, 0, pages*PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
			t.Fatal(err)
		}
		defer unix.Munmap(maps[i])
	}
	l, err := Open(0, f)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if n := len(l.Ranges()); n != 2 {
		t.Fatalf("%d ranges before Exclude, want 2", n)
	}
	if n, err := l.Exclude(maps[0]); err != nil || n != 1 {
		t.Fatalf("Exclude = %d, %v; want 1 left out", n, err)
	}
	if got := l.Ranges(); len(got) != 1 || got[0].Addr != addrOf(maps[1]) {
		t.Fatalf("ranges %+v after Exclude, want only the guest's mapping at %#x", got, addrOf(maps[1]))
	}
	if err := l.Arm(); err != nil {
		t.Fatal(err)
	}
	maps[0][3*PageSize] = 1 // the engine's store: marked by its writer, not logged
	maps[1][9*PageSize+100] = 1
	for _, read := range []func([]int) ([]int, error){l.Peek, l.Written} {
		if got, err := read(nil); err != nil || !slices.Equal(got, []int{9}) {
			t.Fatalf("read = %v, %v; want [9] (the guest's store only)", got, err)
		}
	}
	if _, err := l.Exclude(maps[1]); !errors.Is(err, ErrArmed) {
		t.Fatalf("Exclude after Arm = %v, want ErrArmed", err)
	}
}

// TestExcludeOtherProcess: a log of another process leaves nothing out,
// whatever this process maps at the address given.
func TestExcludeOtherProcess(t *testing.T) {
	c := startChild(t)
	l := openChild(t, c)
	if n, err := l.Exclude(c.mem); err != nil || n != 0 || len(l.Ranges()) != 1 {
		t.Fatalf("Exclude on the child's log = %d, %v, ranges %+v; want nothing left out", n, err, l.Ranges())
	}
}
