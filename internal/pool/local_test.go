package pool

import (
	"bytes"
	"errors"
	"testing"

	"github.com/gmig-dev/gmig/internal/memprobe"
)

// TestLocalMemoryInNoFile: a partition's device-local memory follows its
// graphics memory in the pool, starts as zeros, and is in no file: the
// client's memfd is exactly the graphics memory, so writes to local memory
// never show through it at any offset, nor its bytes once the partition is
// freed and re-allocated.
func TestLocalMemoryInNoFile(t *testing.T) {
	p := newPool(t, 32*PageSize)
	a, err := p.AllocLocal(4*PageSize, 8*PageSize)
	if err != nil {
		t.Fatal(err)
	}
	if a.End() != a.Offset+12*PageSize || a.ApertureEnd() != a.Offset+4*PageSize || a.LocalPages() != 8 {
		t.Fatalf("partition %+v: End %#x, ApertureEnd %#x", a, a.End(), a.ApertureEnd())
	}
	loc := p.LocalSlice(a)
	if len(loc) != 8*PageSize || !allZero(loc) {
		t.Fatalf("local slice: %d bytes, zero %v", len(loc), allZero(loc))
	}
	if &loc[0] != &p.Mem()[a.ApertureEnd()] || len(p.Slice(a)) != 4*PageSize {
		t.Fatal("local memory is not right after the graphics memory")
	}
	fill(p.Slice(a), 0xaa)
	fill(loc, 0x5c)

	f := clientFD(t, p, a)
	st, err := f.Stat()
	if err != nil || st.Size() != 4*PageSize {
		t.Fatalf("memfd size %d, %v; want exactly the graphics memory", st.Size(), err)
	}
	if m := clientMap(t, f, 0, 4*PageSize); m == nil || bytes.IndexByte(m, 0x5c) >= 0 {
		t.Fatal("the client's mapping shows local bytes (or could not be made)")
	}
	buf := make([]byte, PageSize)
	if n, _ := f.ReadAt(buf, 4*PageSize); n != 0 {
		t.Errorf("read %d bytes past the graphics memory through the memfd", n)
	}

	if err := p.Free(a); err != nil {
		t.Fatal(err)
	}
	if _, ok := memprobe.Load(p.Mem(), int(a.ApertureEnd())); ok {
		t.Error("freed local memory is still mapped")
	}
	b, err := p.AllocLocal(4*PageSize, 8*PageSize)
	if err != nil || b != a {
		t.Fatalf("re-allocation %+v, %v; want the same place %+v", b, err, a)
	}
	if !allZero(p.LocalSlice(b)) {
		t.Error("a re-allocated partition's local memory holds the old tenant's bytes")
	}
	if _, err := p.AllocLocal(PageSize, 100); !errors.Is(err, ErrSize) {
		t.Errorf("local size not a page multiple: %v, want ErrSize", err)
	}
	if _, err := p.AllocLocal(PageSize, 32*PageSize); !errors.Is(err, ErrNoSpace) {
		t.Errorf("too large: %v, want ErrNoSpace", err)
	}
}

// TestDiscardLocal: DiscardLocal gives exactly the named local pages back
// to the kernel — they read as zeros and are not resident, and take a new
// write like any page — and leaves the rest of the partition's local
// memory, its graphics memory and a neighbour's local memory as they were.
func TestDiscardLocal(t *testing.T) {
	p := newPool(t, 64*PageSize)
	a, err := p.AllocLocal(4*PageSize, 8*PageSize)
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.AllocLocal(4*PageSize, 8*PageSize) // right after a
	if err != nil || b.Offset != a.End() {
		t.Fatalf("second partition %v, %v; want it at %#x", b, err, a.End())
	}
	gfx, loc, next := p.Slice(a), p.LocalSlice(a), p.LocalSlice(b)
	fill(gfx, 0xaa)
	fill(loc, 0x5c)
	fill(next, 0x77)
	if n := resident(t, loc); n != 8 {
		t.Fatalf("%d local pages resident after writing all 8", n)
	}
	if err := p.DiscardLocal(a, 2*PageSize, 3*PageSize); err != nil {
		t.Fatal(err)
	}
	if n := resident(t, loc); n != 5 {
		t.Errorf("%d local pages resident after discarding 3 of 8, want 5", n)
	}
	if !allZero(loc[2*PageSize : 5*PageSize]) {
		t.Error("discarded pages do not read as zeros")
	}
	if bytes.Count(loc[:2*PageSize], []byte{0x5c}) != 2*PageSize || bytes.Count(loc[5*PageSize:], []byte{0x5c}) != 3*PageSize {
		t.Error("pages outside the discarded range changed")
	}
	if bytes.Count(gfx, []byte{0xaa}) != len(gfx) || bytes.Count(next, []byte{0x77}) != len(next) {
		t.Error("the graphics memory or the neighbour's local memory changed")
	}
	// (Reading a discarded page maps the kernel's zero page, which
	// mincore counts as resident: residency is measured before reads.)
	loc[3*PageSize+9] = 0x42
	if loc[3*PageSize+9] != 0x42 {
		t.Error("a discarded page does not take a new write")
	}
	if err := p.DiscardLocal(a, 0, 8*PageSize); err != nil {
		t.Fatal(err)
	}
	if n := resident(t, loc); n != 0 || !allZero(loc) {
		t.Errorf("after discarding all local memory: %d pages resident, zero %v", n, allZero(loc))
	}
}

// TestDiscardLocalBounds: DiscardLocal refuses ranges that are not
// page-aligned or leave the partition's local memory (overflow included),
// partitions it does not hold, and a closed pool.
func TestDiscardLocalBounds(t *testing.T) {
	p := newPool(t, 64*PageSize)
	a, err := p.AllocLocal(4*PageSize, 8*PageSize)
	if err != nil {
		t.Fatal(err)
	}
	plain := mustAlloc(t, p, 4*PageSize)
	for _, c := range []struct {
		name   string
		pt     Partition
		off, n uint64
		want   error
	}{
		{"whole", a, 0, 8 * PageSize, nil},
		{"empty at the end", a, 8 * PageSize, 0, nil},
		{"unaligned offset", a, 100, PageSize, ErrAlign},
		{"unaligned size", a, 0, 100, ErrSize},
		{"one page past the end", a, PageSize, 8 * PageSize, ErrRange},
		{"offset past the end", a, 9 * PageSize, 0, ErrRange},
		{"overflowing", a, 4 * PageSize, ^uint64(0) - PageSize + 1, ErrRange},
		{"no local memory", plain, 0, PageSize, ErrRange},
		{"not a partition", Partition{Offset: a.Offset, Size: a.Size, Local: 4 * PageSize}, 0, PageSize, ErrNotFound},
	} {
		err := p.DiscardLocal(c.pt, c.off, c.n)
		if c.want == nil && err != nil || c.want != nil && !errors.Is(err, c.want) {
			t.Errorf("%s: DiscardLocal(%v, %#x, %#x) = %v, want %v", c.name, c.pt, c.off, c.n, err, c.want)
		}
	}
	if err := p.Free(a); err != nil {
		t.Fatal(err)
	}
	if err := p.DiscardLocal(a, 0, PageSize); !errors.Is(err, ErrNotFound) {
		t.Errorf("freed partition: %v, want ErrNotFound", err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.DiscardLocal(plain, 0, 0); !errors.Is(err, ErrClosed) {
		t.Errorf("closed pool: %v, want ErrClosed", err)
	}
}

func resident(t *testing.T, b []byte) int {
	t.Helper()
	n, err := memprobe.Resident(b)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
