package nvidia

// pending records which bytes of graphics memory the NVIDIA back end has
// written on the device and not yet copied back to the host window (the
// aperture): the bytes where the device copy is newer. It is kept per
// 4096-byte page as one contiguous byte range, [lo, hi) within the page;
// writes that would make a page's range non-contiguous are made
// contiguous by the caller first uploading the gap (see nvidia.go,
// markWritten), so the invariant "device bytes matter exactly where
// pending says" always holds. Only the engine goroutine uses it.
type pending struct {
	ranges []uint32 // per page: hi<<16 | lo, 0 = none (hi > lo when set)
	list   []uint32 // pages that were set since the last reset (may repeat)
	count  int      // pages with a range
}

const pageBytes = 4096

func newPending(pages int) *pending { return &pending{ranges: make([]uint32, pages)} }

// get returns page p's range; ok is false when it has none.
func (pd *pending) get(p uint64) (lo, hi uint64, ok bool) {
	r := pd.ranges[p]
	if r == 0 {
		return 0, 0, false
	}
	return uint64(r & 0xffff), uint64(r >> 16), true
}

func (pd *pending) set(p, lo, hi uint64) {
	if pd.ranges[p] == 0 {
		pd.list = append(pd.list, uint32(p))
		pd.count++
	}
	pd.ranges[p] = uint32(hi<<16 | lo)
}

func (pd *pending) clearPage(p uint64) {
	if pd.ranges[p] != 0 {
		pd.ranges[p] = 0
		pd.count--
	}
}

// empty reports whether no byte is pending.
func (pd *pending) empty() bool { return pd.count == 0 }

// reset forgets everything (after every range was copied back).
func (pd *pending) reset() {
	for _, p := range pd.list {
		pd.ranges[p] = 0
	}
	pd.list = pd.list[:0]
	pd.count = 0
}

// span is a byte range of graphics memory, window-relative.
type span struct{ off, n uint64 }

// forPages calls fn for each page part of s: page p, bytes [a, b) in it.
func forPages(s span, fn func(p, a, b uint64)) {
	for off, end := s.off, s.off+s.n; off < end; {
		p, a := off/pageBytes, off%pageBytes
		b := min(pageBytes, a+end-off)
		fn(p, a, b)
		off += b - a
	}
}
