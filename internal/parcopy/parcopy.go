// Package parcopy spreads a large memory copy over several cores. One core
// copies some 10 GB/s; the stop phase of a migration moves up to a few
// hundred MiB of device-local pages between host buffers (gathering
// scattered pages into a staging buffer, or out of one), where a single
// core's copy is a large share of the downtime. Small copies stay on the
// caller's goroutine.
package parcopy

import (
	"runtime"
	"sync"
)

// MaxWorkers is the most goroutines a copy is spread over: beyond about
// eight, host memory bandwidth rather than cores bounds a copy.
const MaxWorkers = 8

// Grain is the least a worker is given: 1 MiB, so that a goroutine's
// start (about a microsecond) is under 1 % of its share.
const Grain = 1 << 20

// Split runs fn over [0, n) in contiguous parts [lo, hi), each at least
// grain long (but the last), at most min(GOMAXPROCS, MaxWorkers) of them
// at once, one of them on the caller's goroutine, and returns when all
// have. fn must be safe to run concurrently on disjoint parts.
func Split(n, grain int, fn func(lo, hi int)) {
	w := min(runtime.GOMAXPROCS(0), MaxWorkers, n/max(grain, 1))
	if w <= 1 {
		if n > 0 {
			fn(0, n)
		}
		return
	}
	per := (n + w - 1) / w
	var wg sync.WaitGroup
	for lo := per; lo < n; lo += per {
		wg.Go(func() { fn(lo, min(n, lo+per)) })
	}
	fn(0, per)
	wg.Wait()
}

// Copy copies src into dst (min of their lengths, as the copy builtin)
// and returns the count; the ranges must not overlap.
func Copy(dst, src []byte) int {
	n := min(len(dst), len(src))
	Split(n, Grain, func(lo, hi int) { copy(dst[lo:hi], src[lo:hi]) })
	return n
}

// Pages copies n fixed-size pieces: page(i) gives the i-th piece's
// destination and source, of equal length. Pieces are spread so that each
// worker copies at least Grain bytes, size being the bytes of one piece.
func Pages(n, size int, page func(i int) (dst, src []byte)) {
	Split(n, max(1, Grain/max(size, 1)), func(lo, hi int) {
		for i := lo; i < hi; i++ {
			d, s := page(i)
			copy(d, s)
		}
	})
}
