//go:build linux

package uffdwp

import (
	"os"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSplitRanges: the pieces cover every range exactly, in order, cut at
// page-table boundaries, about one share per worker and never below the
// least size.
func TestSplitRanges(t *testing.T) {
	const mib = 1 << 20
	ranges := []Range{{Addr: 0x7f0000001000, Len: 1024 * mib}, {Addr: 0x7f8000000000, Len: 1024 * mib}, {Addr: 0x7fa000000000, Len: 3 * mib}}
	for _, c := range []struct {
		workers int
		least   uint64
		want    int // pieces
	}{
		{1, minPiece, 3},   // one per range
		{2, minPiece, 3},   // a share is a whole range
		{8, minPiece, 9},   // 256 MiB shares: 4 + 4 + the short range
		{64, minPiece, 9},  // never below minPiece
		{64, 64 * mib, 33}, // 16 + 16 + 1
	} {
		ps := splitRanges(ranges, c.workers, c.least)
		if len(ps) != c.want {
			t.Errorf("workers %d, least %d: %d pieces, want %d", c.workers, c.least, len(ps), c.want)
		}
		i := 0
		for _, r := range ranges {
			a := r.Addr
			for ; i < len(ps) && ps[i].r == r; i++ {
				p := ps[i]
				if p.start != a || p.end <= p.start {
					t.Fatalf("workers %d: piece %d is [%#x, %#x), want it to start at %#x", c.workers, i, p.start, p.end, a)
				}
				if p.end != r.Addr+r.Len && p.end%pieceAlign != 0 {
					t.Errorf("workers %d: piece %d ends at %#x, not a page-table boundary", c.workers, i, p.end)
				}
				a = p.end
			}
			if a != r.Addr+r.Len {
				t.Fatalf("workers %d: range %#x+%#x covered up to %#x", c.workers, r.Addr, r.Len, a)
			}
		}
	}
}

// selfMemfd maps a fresh memfd of pages pages in this process, touches
// the first half and opens a log over it walked by workers goroutines in
// pieces of least bytes.
func selfMemfd(t *testing.T, pages, workers int, least uint64) ([]byte, *Log) {
	t.Helper()
	fd, err := unix.MemfdCreate("uffdwp-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "uffdwp-test")
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(int64(pages * PageSize)); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(fd, 0, pages*PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	for p := range pages / 2 {
		mem[p*PageSize] = 1
	}
	l, err := Open(0, f)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	l.workers, l.pieces = workers, splitRanges(l.ranges, workers, least)
	if err := l.Arm(); err != nil {
		t.Fatal(err)
	}
	return mem, l
}

// TestPeek: Peek reports the written pages and leaves them logged (a
// second Peek and then Written report them again); Written protects them
// again, after which both report nothing until the next store.
func TestPeek(t *testing.T) {
	mem, l := selfMemfd(t, 64, 1, minPiece)
	mem[3*PageSize+5], mem[40*PageSize] = 9, 9 // populated, never touched
	want := []int{3, 40}
	for _, read := range []struct {
		name string
		fn   func([]int) ([]int, error)
	}{{"Peek", l.Peek}, {"Peek again", l.Peek}, {"Written", l.Written}} {
		if got, err := read.fn(nil); err != nil || !slices.Equal(got, want) {
			t.Fatalf("%s = %v, %v; want %v", read.name, got, err, want)
		}
	}
	for _, read := range []func([]int) ([]int, error){l.Peek, l.Written} {
		if got, err := read(nil); err != nil || len(got) != 0 {
			t.Fatalf("a read after Written with no stores = %v, %v; want none", got, err)
		}
	}
	mem[63*PageSize+4095] = 1
	if got, err := l.Peek(nil); err != nil || !slices.Equal(got, []int{63}) {
		t.Fatalf("Peek after a store to page 63 = %v, %v; want [63]", got, err)
	}
}

// TestReadInPieces: a log walked in 4 MiB pieces by four goroutines
// reports exactly the pages stored to, ascending, across piece
// boundaries, and Arm protects every piece.
func TestReadInPieces(t *testing.T) {
	const pages = 16 << 20 / PageSize // 4 pieces of 1024 pages
	mem, l := selfMemfd(t, pages, 4, pieceAlign)
	if len(l.pieces) != 4 {
		t.Fatalf("%d pieces, want 4", len(l.pieces))
	}
	want := []int{0, 1023, 1024, 1500, 2047, 2048, 3071, 3072, pages - 1}
	for _, p := range want {
		mem[p*PageSize+p%PageSize]++
	}
	for _, read := range []func([]int) ([]int, error){l.Peek, l.Written} {
		if got, err := read([]int{-1}); err != nil || !slices.Equal(got, append([]int{-1}, want...)) {
			t.Fatalf("read = %v, %v; want [-1] then %v", got, err, want)
		}
	}
	if err := l.Arm(); err != nil {
		t.Fatal(err)
	}
	if got, err := l.Peek(nil); err != nil || len(got) != 0 {
		t.Fatalf("Peek after Arm = %v, %v; want none", got, err)
	}
}
