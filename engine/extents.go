package engine

import (
	"slices"

	"github.com/gmig-dev/gmig/gtt"
)

// extentIndex gives random access by byte offset into the run that a list
// of extents describes.
type extentIndex struct {
	xs    []gtt.Extent
	start []uint64 // start[i]: offset of xs[i] in the run
}

func newIndex(xs []gtt.Extent) *extentIndex {
	ix := &extentIndex{xs: xs, start: make([]uint64, len(xs))}
	var off uint64
	for i, x := range xs {
		ix.start[i] = off
		off += x.Len
	}
	return ix
}

// find returns the index of the extent holding run offset off, and off's
// position inside it.
func (ix *extentIndex) find(off uint64) (int, uint64) {
	i, _ := slices.BinarySearchFunc(ix.start, off, func(s, off uint64) int {
		if s <= off {
			return -1
		}
		return 1
	})
	i-- // last extent starting at or before off
	for i >= 0 && i < len(ix.xs) && off-ix.start[i] >= ix.xs[i].Len {
		i++ // skip empty extents
	}
	if i < 0 || i >= len(ix.xs) {
		return len(ix.xs), 0
	}
	return i, off - ix.start[i]
}

// read copies run bytes [off, off+len(dst)) into dst.
func (ix *extentIndex) read(mem []byte, off uint64, dst []byte) {
	i, in := ix.find(off)
	for ; len(dst) > 0 && i < len(ix.xs); i, in = i+1, 0 {
		x := ix.xs[i]
		n := copy(dst, mem[x.Off+in:x.Off+x.Len])
		dst = dst[n:]
	}
}

// write copies src over run bytes [off, off+len(src)).
func (ix *extentIndex) write(mem []byte, off uint64, src []byte) {
	i, in := ix.find(off)
	for ; len(src) > 0 && i < len(ix.xs); i, in = i+1, 0 {
		x := ix.xs[i]
		n := copy(mem[x.Off+in:x.Off+x.Len], src)
		src = src[n:]
	}
}

// sliceExtents returns the extents covering bytes [off, off+n) of the run
// described by xs. The result shares no memory with xs.
func sliceExtents(xs []gtt.Extent, off, n uint64) []gtt.Extent {
	var out []gtt.Extent
	for _, x := range xs {
		if n == 0 {
			break
		}
		if off >= x.Len {
			off -= x.Len
			continue
		}
		l := min(x.Len-off, n)
		out = append(out, gtt.Extent{Off: x.Off + off, Len: l})
		off, n = 0, n-l
	}
	return out
}

// gather copies the bytes of xs, in order, into dst (len(dst) bytes at most).
func gather(dst, mem []byte, xs []gtt.Extent) {
	for _, x := range xs {
		if len(dst) == 0 {
			return
		}
		c := copy(dst, mem[x.Off:x.Off+x.Len])
		dst = dst[c:]
	}
}

// scatter copies src, in order, over the bytes of xs.
func scatter(mem []byte, xs []gtt.Extent, src []byte) {
	for _, x := range xs {
		if len(src) == 0 {
			return
		}
		c := copy(mem[x.Off:x.Off+x.Len], src)
		src = src[c:]
	}
}

// region returns the host bytes of xs as one slice when xs is a single
// extent (or several that are contiguous in order), else nil.
func region(mem []byte, xs []gtt.Extent) []byte {
	if len(xs) == 0 {
		return nil
	}
	start, end := xs[0].Off, xs[0].Off+xs[0].Len
	for _, x := range xs[1:] {
		if x.Off != end {
			return nil
		}
		end += x.Len
	}
	return mem[start:end:end]
}

// cursor hands out consecutive pieces of the run that xs describes.
type cursor struct {
	xs  []gtt.Extent
	off uint64 // bytes of xs[0] already handed out
}

// next returns the extents of the next n bytes of the run (fewer at its
// end) in a new slice.
func (c *cursor) next(n uint64) []gtt.Extent {
	var out []gtt.Extent
	for n > 0 && len(c.xs) > 0 {
		x := c.xs[0]
		l := min(x.Len-c.off, n)
		if l > 0 {
			out = append(out, gtt.Extent{Off: x.Off + c.off, Len: l})
		}
		c.off += l
		n -= l
		if c.off == x.Len {
			c.xs, c.off = c.xs[1:], 0
		}
	}
	return out
}
