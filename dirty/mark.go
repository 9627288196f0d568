package dirty

// MarkWritten records that the engine wrote bytes [off, off+n) of mem (a
// host extent from engine.Events.Wrote, less the partition's pool offset).
// Every page the range touches is dirty with source Engine until it is
// recorded again or cleared. The part of a range outside mem is ignored.
// It is cheap (a few atomic ORs) and safe to call from any goroutine.
func (t *Tracker) MarkWritten(off, n uint64) {
	size := uint64(len(t.mem))
	if n == 0 || off >= size {
		return
	}
	end := off + n
	if end > size || end < off {
		end = size
	}
	t.engine.setRange(int(off/PageSize), int((end-1)/PageSize)+1)
}

// ClearPages forgets the engine and background marks of the given pages, as
// after they were sent again; from then on only their content decides
// whether they are dirty. Record does this itself for the pages it records.
// Out-of-range indices are ignored.
func (t *Tracker) ClearPages(pages []int) {
	for _, p := range pages {
		if p >= 0 && p < t.pages {
			t.engine.clear(p)
			t.background.clear(p)
		}
	}
}

// Reset forgets every engine and background mark. Recorded hashes stay.
func (t *Tracker) Reset() {
	t.engine.clearAll()
	t.background.clearAll()
}
