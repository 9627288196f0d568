package cpuref

import (
	"errors"
	"fmt"
	"slices"

	"github.com/gmig-dev/gmig/gtt"
)

// ErrBounds is returned by the back ends for an extent that does not
// lie inside the host pool mapping, or for buffers whose sizes disagree.
var ErrBounds = errors.New("cpuref: extent outside host memory")

// CheckExtents verifies that every extent lies inside a pool of size bytes
// and returns their total length.
func CheckExtents(size uint64, xs []gtt.Extent) (uint64, error) {
	var total uint64
	for _, x := range xs {
		end := x.Off + x.Len
		if end < x.Off || end > size {
			return 0, fmt.Errorf("%w: [%#x, +%#x) in a pool of %#x bytes", ErrBounds, x.Off, x.Len, size)
		}
		total += x.Len
		if total < x.Len {
			return 0, fmt.Errorf("%w: extents total more than 2^64 bytes", ErrBounds)
		}
	}
	return total, nil
}

// Aliased reports whether any two non-empty extents of the given lists
// (within one list or across lists) share a byte of host memory.
func Aliased(lists ...[]gtt.Extent) bool {
	n := 0
	for _, l := range lists {
		n += len(l)
	}
	if n < 2 {
		return false
	}
	all := make([]gtt.Extent, 0, n)
	for _, l := range lists {
		for _, x := range l {
			if x.Len > 0 {
				all = append(all, x)
			}
		}
	}
	slices.SortFunc(all, cmpOff)
	for i := 1; i < len(all); i++ {
		if all[i].Off < all[i-1].Off+all[i-1].Len {
			return true
		}
	}
	return false
}

// Overlaps reports whether some extent of a shares a byte with some extent
// of b. Overlap within a or within b alone does not count.
func Overlaps(a, b []gtt.Extent) bool {
	u := union(a)
	for _, x := range b {
		if x.Len == 0 {
			continue
		}
		// First union interval ending after x starts.
		i, _ := slices.BinarySearchFunc(u, x.Off, func(e gtt.Extent, off uint64) int {
			if e.Off+e.Len <= off {
				return -1
			}
			return 1
		})
		if i < len(u) && u[i].Off < x.Off+x.Len {
			return true
		}
	}
	return false
}

// union returns the non-empty extents of xs sorted and merged into disjoint
// intervals.
func union(xs []gtt.Extent) []gtt.Extent {
	u := make([]gtt.Extent, 0, len(xs))
	for _, x := range xs {
		if x.Len > 0 {
			u = append(u, x)
		}
	}
	slices.SortFunc(u, cmpOff)
	out := u[:0]
	for _, x := range u {
		if n := len(out); n > 0 && x.Off <= out[n-1].Off+out[n-1].Len {
			out[n-1].Len = max(out[n-1].Off+out[n-1].Len, x.Off+x.Len) - out[n-1].Off
			continue
		}
		out = append(out, x)
	}
	return out
}

func cmpOff(a, b gtt.Extent) int {
	switch {
	case a.Off < b.Off:
		return -1
	case a.Off > b.Off:
		return 1
	}
	return 0
}
