package guest

import (
	"errors"
	"fmt"
	"sort"

	"github.com/gmig-dev/gmig/abi"
)

// ErrNoGraphicsMemory is returned when the allocator has no free range
// large enough.
var ErrNoGraphicsMemory = errors.New("guest: out of graphics memory")

// span is a free graphics range [start, end).
type span struct{ start, end uint64 }

// allocator hands out page-aligned graphics-address ranges first fit.
type allocator struct {
	free []span            // sorted, disjoint, never adjacent
	used map[uint64]uint64 // start -> size of live allocations
}

func (a *allocator) init(size uint64) {
	a.free = []span{{0, size}}
	a.used = map[uint64]uint64{}
}

func pageRoundUp(n uint64) uint64 { return (n + abi.PageSize - 1) &^ (abi.PageSize - 1) }

func (a *allocator) alloc(n uint64) (uint64, error) {
	if n == 0 {
		return 0, errors.New("guest: zero-byte graphics allocation")
	}
	n = pageRoundUp(n)
	for i, s := range a.free {
		if s.end-s.start < n {
			continue
		}
		ga := s.start
		if a.free[i].start += n; a.free[i].start == s.end {
			a.free = append(a.free[:i], a.free[i+1:]...)
		}
		a.used[ga] = n
		return ga, nil
	}
	return 0, fmt.Errorf("%w: no %#x-byte range free", ErrNoGraphicsMemory, n)
}

func (a *allocator) release(ga uint64) error {
	n, ok := a.used[ga]
	if !ok {
		return fmt.Errorf("guest: freeing %#x, which is not an allocation", ga)
	}
	delete(a.used, ga)
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].start > ga })
	s := span{ga, ga + n}
	a.free = append(a.free, span{})
	copy(a.free[i+1:], a.free[i:])
	a.free[i] = s
	// Merge with the right neighbour, then the left one.
	if i+1 < len(a.free) && a.free[i].end == a.free[i+1].start {
		a.free[i].end = a.free[i+1].end
		a.free = append(a.free[:i+1], a.free[i+2:]...)
	}
	if i > 0 && a.free[i-1].end == a.free[i].start {
		a.free[i-1].end = a.free[i].end
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
	return nil
}

// freeBytes is the total free graphics memory.
func (a *allocator) freeBytes() uint64 {
	var n uint64
	for _, s := range a.free {
		n += s.end - s.start
	}
	return n
}

// Alloc reserves n bytes (rounded up to whole pages) of mapped graphics
// address space and returns its page-aligned graphics address.
func (d *Driver) Alloc(n uint64) (uint64, error) { return d.alloc.alloc(n) }

// Free returns an allocation made by Alloc.
func (d *Driver) Free(ga uint64) error { return d.alloc.release(ga) }

// FreeBytes is the graphics memory the allocator has left.
func (d *Driver) FreeBytes() uint64 { return d.alloc.freeBytes() }
