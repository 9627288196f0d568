package dirty

import (
	"fmt"
	"math/bits"
)

// Marks is the dirty set of memory that only the engine writes: a vGPU's
// device-local memory on the software back end (docs/device-abi.md §1.3).
// No guest CPU store reaches it, so the engine's writes
// (engine.Events.Wrote) are every change and the marks are exact: a
// migration's stop phase sends the marked pages and hashes none, whatever
// the memory's size. (On the NVIDIA back end guest kernels write local
// memory where the engine cannot see: there the GPU page hash finds the
// changes, not marks.) It is the
// Tracker's engine bitmap without the hashes, and safe for concurrent use
// the same way (atomics, no locks).
type Marks struct {
	pages int
	set   bitmap
}

// NewMarks returns Marks over pages pages, none marked.
func NewMarks(pages int) *Marks { return &Marks{pages: pages, set: newBitmap(pages)} }

// Pages is the number of pages tracked.
func (m *Marks) Pages() int { return m.pages }

// MarkWritten marks every page that bytes [off, off+n) touch (offsets in
// the tracked memory); the part of a range outside it is ignored.
func (m *Marks) MarkWritten(off, n uint64) {
	size := uint64(m.pages) * PageSize
	if n == 0 || off >= size {
		return
	}
	end := off + n
	if end > size || end < off {
		end = size
	}
	m.set.setRange(int(off/PageSize), int((end-1)/PageSize)+1)
}

// CopyClear clears the marks of pages, then copies each, in order, from
// mem (the tracked memory) into buf (PageSize bytes each): a write that
// races with the copy is marked again, so what the copy missed is sent
// later. mem may be written meanwhile (the copy reads as the Tracker's
// do). An out-of-range page or a short buffer fails before anything
// changes.
func (m *Marks) CopyClear(pages []int, mem, buf []byte) error {
	if len(mem) < m.pages*PageSize {
		return fmt.Errorf("dirty: %d bytes of memory for %d pages", len(mem), m.pages)
	}
	if len(buf) < len(pages)*PageSize {
		return fmt.Errorf("dirty: copy buffer of %d bytes is short of %d pages", len(buf), len(pages))
	}
	for _, p := range pages {
		if p < 0 || p >= m.pages {
			return fmt.Errorf("dirty: page %d out of range [0, %d)", p, m.pages)
		}
	}
	for _, p := range pages {
		m.set.clear(p)
	}
	for i, p := range pages {
		copyPage(buf[i*PageSize:(i+1)*PageSize], mem[p*PageSize:(p+1)*PageSize])
	}
	return nil
}

// Marked lists the marked pages, ascending.
func (m *Marks) Marked() []int {
	var out []int
	for w := range m.set {
		for word := m.set[w].Load(); word != 0; word &= word - 1 {
			out = append(out, w*64+bits.TrailingZeros64(word))
		}
	}
	return out
}
