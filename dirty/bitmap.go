package dirty

import "sync/atomic"

// bitmap is a fixed-size set of page indices, one bit per page, safe for
// concurrent use.
type bitmap []atomic.Uint64

func newBitmap(n int) bitmap { return make(bitmap, (n+63)/64) }

func (b bitmap) set(i int)      { b[i>>6].Or(1 << (i & 63)) }
func (b bitmap) clear(i int)    { b[i>>6].And(^(uint64(1) << (i & 63))) }
func (b bitmap) has(i int) bool { return b[i>>6].Load()&(1<<(i&63)) != 0 }

// setRange sets bits [lo, hi), a word at a time.
func (b bitmap) setRange(lo, hi int) {
	for lo < hi {
		w, bit := lo>>6, lo&63
		n := min(64-bit, hi-lo)
		mask := ^uint64(0)
		if n < 64 {
			mask = (uint64(1)<<n - 1) << bit
		}
		b[w].Or(mask)
		lo += n
	}
}

// clearAll clears every bit.
func (b bitmap) clearAll() {
	for i := range b {
		b[i].Store(0)
	}
}
