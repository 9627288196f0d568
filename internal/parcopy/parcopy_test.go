package parcopy

import (
	"bytes"
	"math/rand/v2"
	"sync/atomic"
	"testing"
)

func TestSplitCoversEveryIndexOnce(t *testing.T) {
	for _, c := range []struct{ n, grain int }{{0, 1}, {1, 1}, {7, 2}, {1000, 1}, {1000, 333}, {1 << 20, 4096}, {5, 0}} {
		hits := make([]atomic.Int32, c.n)
		var calls atomic.Int32
		Split(c.n, c.grain, func(lo, hi int) {
			calls.Add(1)
			if lo >= hi || lo < 0 || hi > c.n {
				t.Errorf("n %d grain %d: part [%d, %d)", c.n, c.grain, lo, hi)
				return
			}
			for i := lo; i < hi; i++ {
				hits[i].Add(1)
			}
		})
		for i := range hits {
			if h := hits[i].Load(); h != 1 {
				t.Fatalf("n %d grain %d: index %d covered %d times", c.n, c.grain, i, h)
			}
		}
		if c.n > 0 && int(calls.Load()) > MaxWorkers {
			t.Errorf("n %d grain %d: %d parts, at most %d", c.n, c.grain, calls.Load(), MaxWorkers)
		}
		if c.n == 0 && calls.Load() != 0 {
			t.Errorf("n 0: fn called %d times", calls.Load())
		}
	}
}

func TestCopyAndPages(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	src := make([]byte, 9<<20+123)
	for i := range src {
		src[i] = byte(rng.Uint32())
	}
	dst := make([]byte, len(src))
	if n := Copy(dst, src); n != len(src) || !bytes.Equal(dst, src) {
		t.Fatalf("Copy: %d bytes, equal %v", n, bytes.Equal(dst, src))
	}
	const size = 4096
	pages := len(src) / size
	perm := rng.Perm(pages)
	out := make([]byte, pages*size)
	Pages(pages, size, func(i int) ([]byte, []byte) {
		p := perm[i]
		return out[i*size : (i+1)*size], src[p*size : (p+1)*size]
	})
	for i, p := range perm {
		if !bytes.Equal(out[i*size:(i+1)*size], src[p*size:(p+1)*size]) {
			t.Fatalf("Pages: piece %d (page %d) differs", i, p)
		}
	}
}
