package gtt

import (
	"errors"
	"slices"
	"testing"

	"github.com/gmig-dev/gmig/abi"
)

const L = abi.GTTLocal

// TestLocalEntriesResolveAfterGraphicsMemory: a LOCAL entry names local
// page p, which the shadow puts at base + (pages+p)*4096; aperture entries
// are unchanged, and a range may mix both.
func TestLocalEntriesResolveAfterGraphicsMemory(t *testing.T) {
	const base, pages, local = 0x100000, 16, 8
	tb, err := NewWithLocal(32, base, pages, local)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, tb, 0, ent(3, V|W))
	mustWrite(t, tb, 1, ent(0, V|W|L))
	mustWrite(t, tb, 2, ent(local-1, V|L))
	xs, err := tb.Resolve(0, 3*pg, false)
	if err != nil {
		t.Fatal(err)
	}
	want := []Extent{{base + 3*pg, pg}, {base + pages*pg, pg}, {base + (pages+local-1)*pg, pg}}
	if !slices.Equal(xs, want) {
		t.Errorf("Resolve = %v, want %v", xs, want)
	}
	if _, err := tb.Resolve(2*pg, 8, true); !errors.Is(err, ErrFault) {
		t.Errorf("write to a read-only local page: %v, want ErrFault", err)
	}
	if got := tb.MappedPages(false); !slices.Equal(got, []uint64{3}) {
		t.Errorf("MappedPages = %v, want only the aperture page [3]", got)
	}
	if e, _ := tb.Read(1); e != ent(0, V|W|L) {
		t.Errorf("Read(1) = %#x, want the entry as written", e)
	}
}

// TestLocalEntryChecks: a local page at or past the local size is refused
// (ErrOutOfRange), and on a table without local memory bit 2 is reserved
// exactly as before ABI 1.2 (ErrReserved), valid or not; refused writes
// change nothing.
func TestLocalEntryChecks(t *testing.T) {
	tb, err := NewWithLocal(8, 0, 16, 4)
	if err != nil {
		t.Fatal(err)
	}
	mustWrite(t, tb, 0, ent(1, V|L))
	if err := tb.Write(0, ent(4, V|L)); !errors.Is(err, ErrOutOfRange) {
		t.Errorf("local page 4 of 4: %v, want ErrOutOfRange", err)
	}
	if err := tb.Write(0, ent(0, V|L|1<<3)); !errors.Is(err, ErrReserved) {
		t.Errorf("bit 3: %v, want ErrReserved", err)
	}
	if e, _ := tb.Read(0); e != ent(1, V|L) {
		t.Errorf("entry after refusals = %#x, want %#x", e, ent(1, V|L))
	}

	plain := newTable(t, 8, 0, 16)
	if plain.LocalPages() != 0 {
		t.Errorf("LocalPages = %d, want 0", plain.LocalPages())
	}
	for _, e := range []uint64{ent(0, V|L), L, ent(15, L)} {
		if err := plain.Write(0, e); !errors.Is(err, ErrReserved) {
			t.Errorf("Write(%#x) without local memory: %v, want ErrReserved", e, err)
		}
	}
}

// TestLocalRestoreRemaps: the guest's local entries restore onto a table at
// another base and resolve against it (Dynamic Graphics Address Remapping
// covers local memory too); a state naming local pages is refused by a
// table with fewer.
func TestLocalRestoreRemaps(t *testing.T) {
	src, _ := NewWithLocal(4, 0x10000, 8, 4)
	mustWrite(t, src, 1, ent(2, V|W|L))
	dst, _ := NewWithLocal(4, 0x80000, 8, 4)
	if err := dst.Restore(src.Save()); err != nil {
		t.Fatal(err)
	}
	xs, err := dst.Resolve(pg, pg, true)
	if err != nil || !slices.Equal(xs, []Extent{{0x80000 + 10*pg, pg}}) {
		t.Errorf("Resolve after Restore = %v, %v", xs, err)
	}
	small, _ := NewWithLocal(4, 0, 8, 2)
	if err := small.Restore(src.Save()); !errors.Is(err, ErrState) {
		t.Errorf("Restore onto 2 local pages: %v, want ErrState", err)
	}
}
