package memprobe

import (
	"testing"

	"golang.org/x/sys/unix"
)

func TestProbesReportFaults(t *testing.T) {
	page := unix.Getpagesize()
	mem, err := unix.Mmap(-1, 0, 2*page, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(mem)
	if err := unix.Mprotect(mem[page:], unix.PROT_NONE); err != nil {
		t.Fatal(err)
	}
	if !Store(mem, 1, 7) {
		t.Fatal("store to a mapped page faulted")
	}
	if v, ok := Load(mem, 1); !ok || v != 7 {
		t.Fatalf("Load = %d, %v; want 7, true", v, ok)
	}
	if Store(mem, page, 1) {
		t.Fatal("store to a PROT_NONE page did not fault")
	}
	if _, ok := Load(mem, 2*page-1); ok {
		t.Fatal("load from a PROT_NONE page did not fault")
	}
	faults, seen := LoadAll(mem, page)
	if faults != 2 || len(seen) != 1 || seen[0] != 0 {
		t.Fatalf("LoadAll = %d faults, %v; want 2 faults and one zero byte", faults, seen)
	}
	if faults, landed := StoreAll(mem, page, 9); faults != 2 || landed != 1 || mem[0] != 9 {
		t.Fatalf("StoreAll = %d faults, %d landed, mem[0] %d", faults, landed, mem[0])
	}
}

func TestOtherPanicsGoOn(t *testing.T) {
	defer func() {
		if recover() == nil {
			t.Fatal("an index out of range was swallowed")
		}
	}()
	Load(make([]byte, 1), 5)
}
