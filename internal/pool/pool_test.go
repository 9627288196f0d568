package pool

import (
	"bytes"
	"errors"
	"os"
	"slices"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/internal/memprobe"
)

const mib = 1 << 20

func newPool(t *testing.T, size uint64) *Pool {
	t.Helper()
	p, err := New(size)
	if err != nil {
		t.Fatalf("New(%d): %v", size, err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func mustAlloc(t *testing.T, p *Pool, size uint64) Partition {
	t.Helper()
	pt, err := p.Alloc(size)
	if err != nil {
		t.Fatalf("Alloc(%#x): %v", size, err)
	}
	return pt
}

func TestNewRejectsBadSizes(t *testing.T) {
	for _, size := range []uint64{0, 1, PageSize - 1, PageSize + 1, 3*PageSize + 7} {
		if p, err := New(size); !errors.Is(err, ErrSize) {
			if p != nil {
				p.Close()
			}
			t.Errorf("New(%d) = %v, want ErrSize", size, err)
		}
	}
}

func TestNewReservesOnly(t *testing.T) {
	p := newPool(t, 4*mib)
	if p.Size() != 4*mib || len(p.Mem()) != 4*mib {
		t.Fatalf("Size %d, len(Mem) %d, want %d", p.Size(), len(p.Mem()), 4*mib)
	}
	// Nothing is allocated, so nothing is mapped: every page faults.
	if faults, seen := memprobe.LoadAll(p.Mem(), PageSize); len(seen) != 0 || faults == 0 {
		t.Fatalf("fresh pool: %d reads faulted, %d did not; want all to fault", faults, len(seen))
	}
}

func TestAllocIsZeroAndMapped(t *testing.T) {
	p := newPool(t, 4*mib)
	a := mustAlloc(t, p, mib)
	s := p.Slice(a)
	if uint64(len(s)) != a.Size || &s[0] != &p.Mem()[a.Offset] {
		t.Fatalf("Slice(%v) is %d bytes, not the pool's range", a, len(s))
	}
	if !allZero(s) {
		t.Fatal("fresh partition is not zero")
	}
	fill(s, 0x11)
	if _, ok := memprobe.Load(p.Mem(), int(a.End())); ok {
		t.Error("the byte past the only partition is mapped")
	}
	if p.Slice(Partition{Offset: a.Offset, Size: PageSize}) != nil || p.Slice(Partition{Offset: a.End(), Size: PageSize}) != nil {
		t.Error("Slice of a range that is not a partition")
	}
}

func TestAllocFirstFitAndFree(t *testing.T) {
	p := newPool(t, 16*PageSize)
	a := mustAlloc(t, p, 4*PageSize)
	b := mustAlloc(t, p, 2*PageSize)
	c := mustAlloc(t, p, 4*PageSize)
	want := []Partition{{0, 4 * PageSize, 0}, {4 * PageSize, 2 * PageSize, 0}, {6 * PageSize, 4 * PageSize, 0}}
	if got := p.Partitions(); !slices.Equal(got, want) {
		t.Fatalf("Partitions = %v, want %v", got, want)
	}
	if a.Pages() != 4 || b.Pages() != 2 || c.End() != 10*PageSize {
		t.Fatalf("Pages/End wrong: %v %v %v", a, b, c)
	}

	// Free the middle: a 2-page hole at 4, a 6-page tail at 10.
	if err := p.Free(b); err != nil {
		t.Fatal(err)
	}
	// 3 pages do not fit the hole: first fit goes to the tail.
	if d := mustAlloc(t, p, 3*PageSize); d.Offset != 10*PageSize {
		t.Errorf("3 pages at %#x, want the tail %#x", d.Offset, 10*PageSize)
	}
	// 1 page fits the hole.
	if e := mustAlloc(t, p, PageSize); e.Offset != 4*PageSize {
		t.Errorf("1 page at %#x, want the hole %#x", e.Offset, 4*PageSize)
	}
	// Left: one page at 5, three at 13. Four pages fit nowhere.
	if _, err := p.Alloc(4 * PageSize); !errors.Is(err, ErrNoSpace) {
		t.Errorf("fragmented Alloc(4 pages) = %v, want ErrNoSpace", err)
	}
	if f := mustAlloc(t, p, 3*PageSize); f.Offset != 13*PageSize {
		t.Errorf("3 pages at %#x, want %#x", f.Offset, 13*PageSize)
	}
	if g := mustAlloc(t, p, PageSize); g.Offset != 5*PageSize {
		t.Errorf("last page at %#x, want %#x", g.Offset, 5*PageSize)
	}
	if _, err := p.Alloc(PageSize); !errors.Is(err, ErrNoSpace) {
		t.Errorf("full pool Alloc = %v, want ErrNoSpace", err)
	}
	// Freeing everything makes the whole pool one range again.
	for _, pt := range p.Partitions() {
		if err := p.Free(pt); err != nil {
			t.Fatal(err)
		}
	}
	if whole := mustAlloc(t, p, 16*PageSize); whole.Offset != 0 {
		t.Errorf("whole pool at %#x", whole.Offset)
	}
}

func TestAllocRejectsBadSizes(t *testing.T) {
	p := newPool(t, 4*PageSize)
	for _, size := range []uint64{0, 100, PageSize + 1} {
		if _, err := p.Alloc(size); !errors.Is(err, ErrSize) {
			t.Errorf("Alloc(%d) = %v, want ErrSize", size, err)
		}
	}
	if _, err := p.Alloc(8 * PageSize); !errors.Is(err, ErrNoSpace) {
		t.Errorf("Alloc(bigger than pool) = %v, want ErrNoSpace", err)
	}
	if len(p.Partitions()) != 0 {
		t.Errorf("failed allocs left partitions: %v", p.Partitions())
	}
}

func TestAllocAt(t *testing.T) {
	p := newPool(t, 16*PageSize)
	if _, err := p.AllocAt(4*PageSize, 4*PageSize); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name         string
		offset, size uint64
		want         error
	}{
		{"same range", 4 * PageSize, 4 * PageSize, ErrInUse},
		{"overlaps start", 2 * PageSize, 3 * PageSize, ErrInUse},
		{"overlaps end", 7 * PageSize, 2 * PageSize, ErrInUse},
		{"inside", 5 * PageSize, PageSize, ErrInUse},
		{"covers", 0, 16 * PageSize, ErrInUse},
		{"past end", 16 * PageSize, PageSize, ErrRange},
		{"runs off end", 14 * PageSize, 4 * PageSize, ErrRange},
		{"offset overflow", ^uint64(0) &^ (PageSize - 1), PageSize, ErrRange},
		{"size overflow", PageSize, ^uint64(0) &^ (PageSize - 1), ErrRange},
		{"misaligned", 100, PageSize, ErrAlign},
		{"zero size", 0, 0, ErrSize},
	} {
		if _, err := p.AllocAt(tc.offset, tc.size); !errors.Is(err, tc.want) {
			t.Errorf("%s: AllocAt(%#x, %#x) = %v, want %v", tc.name, tc.offset, tc.size, err, tc.want)
		}
	}
	// Abutting ranges on both sides are fine.
	if _, err := p.AllocAt(0, 4*PageSize); err != nil {
		t.Errorf("abutting below: %v", err)
	}
	if _, err := p.AllocAt(8*PageSize, 8*PageSize); err != nil {
		t.Errorf("abutting above: %v", err)
	}
	want := []Partition{{0, 4 * PageSize, 0}, {4 * PageSize, 4 * PageSize, 0}, {8 * PageSize, 8 * PageSize, 0}}
	if got := p.Partitions(); !slices.Equal(got, want) {
		t.Errorf("Partitions = %v, want %v", got, want)
	}
}

func TestFreeUnknownAndDouble(t *testing.T) {
	p := newPool(t, 8*PageSize)
	a := mustAlloc(t, p, 2*PageSize)
	for _, bad := range []Partition{
		{a.Offset, PageSize, 0},     // wrong size
		{PageSize, PageSize, 0},     // inside a
		{4 * PageSize, PageSize, 0}, // never allocated
	} {
		if err := p.Free(bad); !errors.Is(err, ErrNotFound) {
			t.Errorf("Free(%v) = %v, want ErrNotFound", bad, err)
		}
	}
	if err := p.Free(a); err != nil {
		t.Fatal(err)
	}
	if err := p.Free(a); !errors.Is(err, ErrNotFound) {
		t.Errorf("double Free = %v, want ErrNotFound", err)
	}
}

func TestReallocIsFresh(t *testing.T) {
	p := newPool(t, 12*PageSize)
	a := mustAlloc(t, p, 4*PageSize)
	b := mustAlloc(t, p, 4*PageSize)
	fill(p.Slice(a), 0xa5)
	fill(p.Slice(b), 0x5a)
	if err := p.Free(a); err != nil {
		t.Fatal(err)
	}
	c := mustAlloc(t, p, 4*PageSize)
	if c != a {
		t.Fatalf("re-alloc got %v, want %v", c, a)
	}
	if !allZero(p.Slice(c)) {
		t.Error("re-allocated partition still holds the old tenant's bytes")
	}
	if !bytes.Equal(p.Slice(b), bytes.Repeat([]byte{0x5a}, 4*PageSize)) {
		t.Error("Free of a clobbered its neighbour")
	}
}

func TestFileMapsSameBytes(t *testing.T) {
	p := newPool(t, 4*PageSize)
	a, err := p.AllocAt(2*PageSize, 2*PageSize)
	if err != nil {
		t.Fatal(err)
	}
	f, err := p.File(a)
	if err != nil {
		t.Fatal(err)
	}
	// QEMU maps the aperture from the partition's memfd at offset 0.
	other, err := unix.Mmap(int(f.Fd()), 0, int(a.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(other)
	copy(p.Slice(a), "written by gmigd")
	if got := string(other[:16]); got != "written by gmigd" {
		t.Errorf("second mapping reads %q", got)
	}
	copy(other[PageSize:], "written by the guest")
	if got := string(p.Mem()[a.Offset+PageSize:][:20]); got != "written by the guest" {
		t.Errorf("pool mapping reads %q", got)
	}
}

func TestClose(t *testing.T) {
	p, err := New(4 * PageSize)
	if err != nil {
		t.Fatal(err)
	}
	a := mustAlloc(t, p, PageSize)
	f, err := p.File(a)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Stat(); !errors.Is(err, os.ErrClosed) {
		t.Errorf("partition memfd after Close: Stat = %v, want closed", err)
	}
	if err := p.Close(); !errors.Is(err, ErrClosed) {
		t.Errorf("second Close = %v, want ErrClosed", err)
	}
	if _, err := p.Alloc(PageSize); !errors.Is(err, ErrClosed) {
		t.Errorf("Alloc after Close = %v", err)
	}
	if _, err := p.AllocAt(0, PageSize); !errors.Is(err, ErrClosed) {
		t.Errorf("AllocAt after Close = %v", err)
	}
	if err := p.Free(a); !errors.Is(err, ErrClosed) {
		t.Errorf("Free after Close = %v", err)
	}
	if p.Mem() != nil || p.Slice(a) != nil {
		t.Error("Mem/Slice after Close not nil")
	}
	if _, err := p.File(a); !errors.Is(err, ErrClosed) {
		t.Errorf("File after Close = %v", err)
	}
}

func TestConcurrentAllocFree(t *testing.T) {
	p := newPool(t, 64*PageSize)
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				pt, err := p.Alloc(uint64(1+(w+i)%4) * PageSize)
				if errors.Is(err, ErrNoSpace) {
					continue
				}
				if err != nil {
					t.Error(err)
					return
				}
				s := p.Slice(pt)
				if !allZero(s) {
					t.Errorf("fresh partition %v not zero", pt)
				}
				fill(s, byte(w+1))
				if err := p.Free(pt); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if n := len(p.Partitions()); n != 0 {
		t.Errorf("%d partitions left", n)
	}
}

func fill(b []byte, v byte) {
	for i := range b {
		b[i] = v
	}
}

func allZero(b []byte) bool {
	for _, v := range b {
		if v != 0 {
			return false
		}
	}
	return true
}

// TestPartitionMappingPopulates checks that a partition's mapping in the
// pool takes the advice a migration gives it (MADV_POPULATE_*, to fault
// pages in outside the downtime), as any shared file mapping does, while
// the reserved range around it refuses.
func TestPartitionMappingPopulates(t *testing.T) {
	p := newPool(t, 8*PageSize)
	a, err := p.AllocAt(2*PageSize, 4*PageSize)
	if err != nil {
		t.Fatal(err)
	}
	for _, advice := range []int{unix.MADV_POPULATE_READ, unix.MADV_POPULATE_WRITE} {
		err := unix.Madvise(p.Slice(a), advice)
		if errors.Is(err, unix.EINVAL) {
			t.Skip("kernel without MADV_POPULATE_* (before 5.14)")
		}
		if err != nil {
			t.Fatalf("madvise(%d) of a partition: %v", advice, err)
		}
	}
	if err := unix.Madvise(p.Mem()[:2*PageSize], unix.MADV_POPULATE_WRITE); err == nil {
		t.Error("populating reserved address space succeeded")
	}
	if !allZero(p.Slice(a)) {
		t.Error("populating changed the partition")
	}
}
