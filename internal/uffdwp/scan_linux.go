//go:build linux

package uffdwp

import (
	"sync"
	"sync/atomic"
)

// vecRegions is how many regions one PAGEMAP_SCAN call can return before
// the walk calls again from where it stopped: 24 KiB of buffer per worker.
const vecRegions = 1024

// pieceAlign is where pieces of a walk are cut: a page table's reach on
// x86-64 (512 PTEs of 4 KiB), so no two workers walk, or lock, the same
// page table.
const pieceAlign = 2 << 20

// minPiece is the least a worker walks: 256 MiB, about 0.1 ms of
// PAGEMAP_SCAN on the development machine (docs/dirty-tracking.md), below
// which another goroutine costs about what it saves.
const minPiece = 256 << 20

// piece is the part [start, end) of the mapping r that one worker walks.
type piece struct {
	r          Range
	start, end uint64
}

// splitRanges cuts the ranges into pieces for up to workers goroutines:
// the share is an equal part of the total per worker, but no less than
// least; each range is cut into the whole number of shares nearest its
// length (at least one), at pieceAlign boundaries. The pieces come in the
// ranges' order, ascending within each.
func splitRanges(ranges []Range, workers int, least uint64) []piece {
	var total uint64
	for _, r := range ranges {
		total += r.Len
	}
	share := max(least, total/uint64(max(1, workers)))
	var out []piece
	for _, r := range ranges {
		n := max(1, (r.Len+share/2)/share)
		end := r.Addr + r.Len
		a := r.Addr
		for k := uint64(1); k <= n; k++ {
			b := end
			if k < n {
				b = (r.Addr + k*(r.Len/n) + pieceAlign - 1) / pieceAlign * pieceAlign
			}
			if b > a {
				out = append(out, piece{r: r, start: a, end: min(b, end)})
				a = min(b, end)
			}
		}
	}
	return out
}

// read is Written (protect) or Peek: every piece of the ranges is walked
// with PAGEMAP_SCAN for PAGE_IS_WRITTEN, on up to l.workers goroutines
// (the kernel takes the mmap lock shared, so walks of disjoint pieces run
// side by side), and the pages found are appended to dst in the pieces'
// order. The first failing piece's error is returned.
func (l *Log) read(dst []int, protect bool) ([]int, error) {
	if err := l.checkMappings(); err != nil {
		return dst, err
	}
	flags := uint64(scanCheckWPAsync)
	if protect {
		flags |= scanWPMatching
	}
	for len(l.found) < len(l.pieces) {
		l.found = append(l.found, nil)
	}
	errs := make([]error, len(l.pieces))
	l.eachPiece(func(w, i int) {
		if l.vecs[w] == nil {
			l.vecs[w] = make([]pageRegion, vecRegions)
		}
		l.found[i], errs[i] = l.walk(l.pieces[i], flags, l.vecs[w], l.found[i][:0])
	})
	for i := range l.pieces {
		if errs[i] != nil {
			return dst, l.scanError("reading written pages", errs[i])
		}
		dst = append(dst, l.found[i]...)
	}
	return dst, nil
}

// eachPiece calls fn(w, i) for every piece i, on up to l.workers
// goroutines that take pieces in turn; w (< len(l.vecs)) names the
// goroutine.
func (l *Log) eachPiece(fn func(w, i int)) {
	workers := max(1, min(l.workers, len(l.pieces)))
	for len(l.vecs) < workers {
		l.vecs = append(l.vecs, nil)
	}
	if workers == 1 {
		for i := range l.pieces {
			fn(0, i)
		}
		return
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(l.pieces); i = int(next.Add(1) - 1) {
				fn(w, i)
			}
		})
	}
	wg.Wait()
}

// walk runs PAGEMAP_SCAN with flags over pc, from where each call stopped
// until the piece's end, and appends the file offsets (in pages) of the
// written pages it returns in vec to dst. With no vec it only walks (Arm:
// the kernel then protects every page without looking at it).
func (l *Log) walk(pc piece, flags uint64, vec []pageRegion, dst []int) ([]int, error) {
	a := pmScanArg{
		Flags: flags, Start: pc.start, End: pc.end,
		CategoryMask: pageIsWritten, ReturnMask: pageIsWritten,
	}
	for a.Start < a.End {
		n, err := pagemapScan(int(l.pagemap.Fd()), &a, vec)
		if err != nil {
			return dst, err
		}
		for _, reg := range vec[:n] {
			for addr := reg.Start; addr < reg.End; addr += PageSize {
				dst = append(dst, int((pc.r.Off+addr-pc.r.Addr)/PageSize))
			}
		}
		a.Start = a.WalkEnd
	}
	return dst, nil
}
