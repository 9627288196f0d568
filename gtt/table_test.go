package gtt

import (
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/gmig-dev/gmig/abi"
)

const (
	pg = abi.PageSize
	V  = abi.GTTValid
	W  = abi.GTTWritable
)

// ent is a guest entry naming aperture page page with flags.
func ent(page uint64, flags uint64) uint64 { return page<<abi.GTTPageShift | flags }

func newTable(t testing.TB, entries uint32, base, pages uint64) *Table {
	t.Helper()
	tb, err := New(entries, base, pages)
	if err != nil {
		t.Fatalf("New(%d, %#x, %d): %v", entries, base, pages, err)
	}
	return tb
}

func mustWrite(t testing.TB, tb *Table, index uint32, e uint64) {
	t.Helper()
	if err := tb.Write(index, e); err != nil {
		t.Fatalf("Write(%d, %#x): %v", index, e, err)
	}
}

func TestNewRejectsBadGeometry(t *testing.T) {
	for _, tc := range []struct {
		entries     uint32
		base, pages uint64
	}{
		{0, 0, 16},
		{abi.GTTMaxEntries + 1, 0, 16},
		{16, 0, 0},
		{16, 0, maxPages + 1},
		{16, 100, 16},
		{16, ^uint64(0) &^ (pg - 1), 16}, // base + size overflows
	} {
		if _, err := New(tc.entries, tc.base, tc.pages); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%d, %#x, %d) = %v, want ErrConfig", tc.entries, tc.base, tc.pages, err)
		}
	}
	tb := newTable(t, abi.GTTMaxEntries, 0x40000, 256)
	if tb.Entries() != abi.GTTMaxEntries || tb.Base() != 0x40000 || tb.Pages() != 256 {
		t.Errorf("accessors: %d %#x %d", tb.Entries(), tb.Base(), tb.Pages())
	}
	for i := range tb.Entries() {
		if e, err := tb.Read(i); e != 0 || err != nil {
			t.Fatalf("fresh entry %d = %#x, %v", i, e, err)
		}
	}
}

func TestWriteValidation(t *testing.T) {
	const entries, pages = 32, 16
	for _, tc := range []struct {
		name  string
		index uint32
		entry uint64
		want  error // nil: accepted
	}{
		{"valid rw", 3, ent(5, V|W), nil},
		{"valid ro", 3, ent(0, V), nil},
		{"last page", 3, ent(pages-1, V|W), nil},
		{"unmap", 3, 0, nil},
		{"invalid names any page", 3, ent(pages+100, W), nil},
		{"invalid, max page field", 3, abi.GTTPageMask, nil},
		{"last index", entries - 1, ent(1, V), nil},
		{"index = entries", entries, ent(1, V), ErrIndex},
		{"index huge", ^uint32(0), 0, ErrIndex},
		{"reserved bit 2", 3, ent(1, V) | 1<<2, ErrReserved},
		{"reserved bit 11", 3, ent(1, V) | 1<<11, ErrReserved},
		{"reserved bit 52", 3, ent(1, V) | 1<<52, ErrReserved},
		{"reserved bit 63", 3, ent(1, V) | 1<<63, ErrReserved},
		{"reserved with valid clear", 3, 1 << 5, ErrReserved},
		{"page = pages", 3, ent(pages, V), ErrOutOfRange},
		{"page far out", 3, ent(1<<39, V|W), ErrOutOfRange},
		{"max page field", 3, abi.GTTPageMask | V, ErrOutOfRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := newTable(t, entries, 7*pg, pages)
			before := ent(9, V|W)
			if tc.index < entries {
				mustWrite(t, tb, tc.index, before)
			}
			err := tb.Write(tc.index, tc.entry)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("Write = %v, want accepted", err)
				}
				if got, _ := tb.Read(tc.index); got != tc.entry {
					t.Errorf("Read = %#x, want %#x", got, tc.entry)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("Write = %v, want %v", err, tc.want)
			}
			if tc.index >= entries {
				if _, err := tb.Read(tc.index); !errors.Is(err, ErrIndex) {
					t.Errorf("Read(%d) = %v, want ErrIndex", tc.index, err)
				}
				return
			}
			if got, _ := tb.Read(tc.index); got != before {
				t.Errorf("refused write changed the entry: %#x, want %#x", got, before)
			}
			xs, err := tb.Resolve(uint64(tc.index)*pg, pg, true)
			if err != nil || !slices.Equal(xs, []Extent{{(7 + 9) * pg, pg}}) {
				t.Errorf("refused write changed the shadow: %v, %v", xs, err)
			}
		})
	}
}

func TestShadowFollowsWrites(t *testing.T) {
	tb := newTable(t, 8, 100*pg, 8)
	mustWrite(t, tb, 2, ent(3, V|W))
	if xs, err := tb.Resolve(2*pg+10, 20, true); err != nil || !slices.Equal(xs, []Extent{{103*pg + 10, 20}}) {
		t.Fatalf("Resolve = %v, %v", xs, err)
	}
	mustWrite(t, tb, 2, ent(3, V)) // write-protect
	if _, err := tb.Resolve(2*pg, 1, true); !errors.Is(err, ErrFault) {
		t.Errorf("write through read-only entry = %v", err)
	}
	mustWrite(t, tb, 2, ent(3, W)) // unmap, keeping a page number
	if _, err := tb.Resolve(2*pg, 1, false); !errors.Is(err, ErrFault) {
		t.Errorf("read through invalid entry = %v", err)
	}
}

func TestReset(t *testing.T) {
	tb := newTable(t, 8, 0, 8)
	for i := range uint32(8) {
		mustWrite(t, tb, i, ent(uint64(i), V|W))
	}
	tb.Reset()
	for i := range uint32(8) {
		if e, _ := tb.Read(i); e != 0 {
			t.Errorf("entry %d = %#x after Reset", i, e)
		}
	}
	if _, err := tb.Resolve(0, 1, false); !errors.Is(err, ErrFault) {
		t.Errorf("Resolve after Reset = %v", err)
	}
}

func TestMappedPages(t *testing.T) {
	tb := newTable(t, 8, 0, 16)
	mustWrite(t, tb, 0, ent(9, V|W))
	mustWrite(t, tb, 1, ent(2, V))
	mustWrite(t, tb, 2, ent(9, V)) // alias of 9, read-only
	mustWrite(t, tb, 3, ent(4, W)) // not valid
	mustWrite(t, tb, 4, ent(0, V|W))
	if got := tb.MappedPages(false); !slices.Equal(got, []uint64{0, 2, 9}) {
		t.Errorf("MappedPages(false) = %v", got)
	}
	if got := tb.MappedPages(true); !slices.Equal(got, []uint64{0, 9}) {
		t.Errorf("MappedPages(true) = %v", got)
	}
}

// TestRestoreRemaps moves a guest view onto another host base through
// Save and Restore, as a migration's destination does (Dynamic Graphics
// Address Remapping): the guest's entries are unchanged, the shadow follows
// the new base, write protection survives.
func TestRestoreRemaps(t *testing.T) {
	src := newTable(t, 8, 0, 4)
	mustWrite(t, src, 0, ent(0, V|W))
	mustWrite(t, src, 1, ent(1, V|W))
	mustWrite(t, src, 5, ent(3, V))
	before := src.Save()
	tb := newTable(t, 8, 64*pg, 4)
	if err := tb.Restore(before); err != nil {
		t.Fatal(err)
	}
	if after := tb.Save(); !slices.Equal(after.Entries, before.Entries) {
		t.Errorf("Restore changed the guest view: %#x -> %#x", before.Entries, after.Entries)
	}
	if xs, err := tb.Resolve(0, 2*pg, true); err != nil || !slices.Equal(xs, []Extent{{64 * pg, 2 * pg}}) {
		t.Errorf("Resolve after Restore = %v, %v", xs, err)
	}
	if xs, err := tb.Resolve(5*pg+1, 2, false); err != nil || !slices.Equal(xs, []Extent{{67*pg + 1, 2}}) {
		t.Errorf("Resolve read-only after Restore = %v, %v", xs, err)
	}
	if _, err := tb.Resolve(5*pg, 1, true); !errors.Is(err, ErrFault) {
		t.Errorf("Restore lost write protection: %v", err)
	}
	// Later writes use the new base.
	mustWrite(t, tb, 2, ent(2, V))
	if xs, _ := tb.Resolve(2*pg, pg, false); !slices.Equal(xs, []Extent{{66 * pg, pg}}) {
		t.Errorf("write after Restore resolves to %v", xs)
	}
}

func TestSaveRestoreRoundTrip(t *testing.T) {
	src := newTable(t, 16, 10*pg, 8)
	mustWrite(t, src, 0, ent(7, V|W))
	mustWrite(t, src, 1, ent(0, V))
	mustWrite(t, src, 9, ent(3, W)) // invalid entries travel as written
	s := src.Save()
	s.Entries[15] = 0 // Save returns a copy: editing it does not touch src
	mustWrite(t, src, 15, ent(1, V))
	if e, _ := src.Read(15); e != ent(1, V) {
		t.Fatal("Save aliases the table")
	}

	dst := newTable(t, 16, 200*pg, 8) // another partition
	mustWrite(t, dst, 4, ent(4, V))   // overwritten by Restore
	if err := dst.Restore(s); err != nil {
		t.Fatal(err)
	}
	if got := dst.Save(); !slices.Equal(got.Entries, s.Entries) {
		t.Errorf("restored %#x, want %#x", got.Entries, s.Entries)
	}
	if dst.Base() != 200*pg {
		t.Errorf("Restore moved the base to %#x", dst.Base())
	}
	if xs, err := dst.Resolve(0, 2*pg, false); err != nil || !slices.Equal(xs, []Extent{{207 * pg, pg}, {200 * pg, pg}}) {
		t.Errorf("restored shadow resolves to %v, %v", xs, err)
	}
	if _, err := dst.Resolve(4*pg, 1, false); !errors.Is(err, ErrFault) {
		t.Errorf("entry not in the state survived Restore: %v", err)
	}
}

func TestRestoreRefusesCorruptState(t *testing.T) {
	good := make([]uint64, 8)
	good[2] = ent(1, V|W)
	for _, tc := range []struct {
		name  string
		state []uint64
		want  error
	}{
		{"too short", good[:7], nil},
		{"too long", append(slices.Clone(good), 0), nil},
		{"nil", nil, nil},
		{"reserved bits", with(good, 5, ent(1, V)|1<<60), ErrReserved},
		{"page beyond this table", with(good, 7, ent(4, V)), ErrOutOfRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := newTable(t, 8, 0, 4)
			mustWrite(t, tb, 0, ent(3, V))
			before := tb.Save()
			err := tb.Restore(State{Entries: tc.state})
			if !errors.Is(err, ErrState) || (tc.want != nil && !errors.Is(err, tc.want)) {
				t.Fatalf("Restore = %v, want ErrState (and %v)", err, tc.want)
			}
			if after := tb.Save(); !slices.Equal(after.Entries, before.Entries) {
				t.Errorf("refused Restore changed entries: %#x", after.Entries)
			}
			if xs, err := tb.Resolve(0, pg, false); err != nil || !slices.Equal(xs, []Extent{{3 * pg, pg}}) {
				t.Errorf("refused Restore changed the shadow: %v, %v", xs, err)
			}
		})
	}
}

func with(s []uint64, i int, v uint64) []uint64 {
	s = slices.Clone(s)
	s[i] = v
	return s
}

// TestConcurrentWriteResolve runs guest writes against engine translations;
// with -race it checks the locking, and every translation must stay inside
// the partition whatever it raced with.
func TestConcurrentWriteResolve(t *testing.T) {
	const entries, pages, base = 64, 32, 1000 * pg
	tb := newTable(t, entries, base, pages)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(2)
	go func() { // vfio server goroutine
		defer wg.Done()
		defer close(stop)
		for i := range 20000 {
			idx := uint32(i*7) % entries
			_ = tb.Write(idx, ent(uint64(i)%(pages+4), V|uint64(i&1)*W)) // some refused
			if i%5000 == 0 {
				_ = tb.Restore(tb.Save())
			}
		}
	}()
	go func() { // engine goroutine
		defer wg.Done()
		buf := make([]Extent, 0, 8)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ga := uint64(i*13) % (entries * pg)
			xs, err := tb.AppendResolve(buf[:0], ga, 3*pg, i&1 == 0)
			if err != nil {
				if !errors.Is(err, ErrFault) {
					t.Errorf("Resolve: %v", err)
					return
				}
				continue
			}
			for _, x := range xs {
				if x.Off < base || x.Off+x.Len > base+pages*pg {
					t.Errorf("extent %v outside the partition", x)
					return
				}
			}
		}
	}()
	wg.Wait()
}
