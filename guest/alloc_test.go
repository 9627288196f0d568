package guest

import (
	"errors"
	"testing"

	"github.com/gmig-dev/gmig/abi"
)

func TestAllocator(t *testing.T) {
	var a allocator
	a.init(16 * abi.PageSize)
	x, err := a.alloc(1) // rounds up to a page
	if err != nil || x != 0 {
		t.Fatalf("alloc(1) = %#x, %v", x, err)
	}
	y, _ := a.alloc(3*abi.PageSize + 1) // 4 pages
	z, _ := a.alloc(abi.PageSize)
	if y != abi.PageSize || z != 5*abi.PageSize {
		t.Fatalf("allocations at %#x, %#x; want %#x, %#x", y, z, abi.PageSize, 5*abi.PageSize)
	}
	if _, err := a.alloc(11 * abi.PageSize); !errors.Is(err, ErrNoGraphicsMemory) {
		t.Fatalf("over-allocation: %v", err)
	}
	if err := a.release(y); err != nil {
		t.Fatal(err)
	}
	if err := a.release(y); err == nil {
		t.Fatal("double free accepted")
	}
	// First fit reuses the hole.
	if w, _ := a.alloc(2 * abi.PageSize); w != y {
		t.Fatalf("first fit gave %#x, want the hole at %#x", w, y)
	}
	a.release(y)
	a.release(x)
	a.release(z)
	if len(a.free) != 1 || a.freeBytes() != 16*abi.PageSize {
		t.Fatalf("free list after releasing everything: %+v", a.free)
	}
}

func TestPermutation(t *testing.T) {
	p := Permutation(1, 4096)
	seen := make([]bool, len(p))
	fixed := 0
	for i, v := range p {
		if seen[v] {
			t.Fatalf("page %d mapped twice", v)
		}
		seen[v] = true
		if uint32(i) == v {
			fixed++
		}
	}
	if fixed > 16 {
		t.Fatalf("%d fixed points: barely a permutation", fixed)
	}
	if q := Permutation(1, 4096); q[100] != p[100] || q[4000] != p[4000] {
		t.Fatal("same seed, different permutation")
	}
	if q := Permutation(2, 4096); equalU32(q, p) {
		t.Fatal("different seeds, same permutation")
	}
}

func equalU32(a, b []uint32) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return len(a) == len(b)
}
