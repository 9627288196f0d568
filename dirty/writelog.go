package dirty

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"slices"
)

// WriteLog is a source of the pages the guest CPU wrote to the tracked
// memory (the vGPU's aperture), from the operating system's page tables
// (internal/guestwrites). Offsets are in PageSize pages of the memory.
type WriteLog interface {
	// Arm starts logging: from its return on, every write to a page is
	// logged. Reading a page after Arm returns and logging a write made
	// after that read are what make a skipped page safe.
	Arm() error
	// Written appends to dst the pages written since Arm or the last
	// Written, in any order and possibly repeated, and starts a new
	// round: a write after the page was looked at is in the next one.
	Written(dst []int) ([]int, error)
}

// A WriteLogPeeker is a WriteLog that can also read without starting a
// new round (uffdwp.Log.Peek): Peek appends what Written would, but the
// pages stay logged and the next read reports them again. The scans of
// frozen memory (ScanFrozen, ScanFrozenStream) use it when the log has it:
// nothing writes until the scan is over, so there is nothing to protect
// again, and such a read is cheaper. Reporting a page again later is only
// an extra page checked.
type WriteLogPeeker interface {
	Peek(dst []int) ([]int, error)
}

// ErrRecordedBeforeLog says UseWriteLog came after pages were recorded: a
// write between such a record and the arm would be missed.
var ErrRecordedBeforeLog = errors.New("dirty: a write log must be armed before any page is recorded")

// WriteLogStats is what the write log did for one scan.
type WriteLogStats struct {
	// Active says the scan trusted a write log: it checked only the
	// pages the log had as written, marked or never recorded.
	Active bool
	// Written is how many pages the log had as written since they were
	// recorded (the pages it sent the scan to check).
	Written int
	// Lost is why an armed log stopped being trusted ("" if it was
	// not); scans check every page from then on.
	Lost string
}

// UseWriteLog arms wl and makes it the Tracker's source of guest writes:
// from then on scans check only the pages wl reports written since they
// were recorded, those an engine or background mark covers and those
// never recorded; every other page is clean without being hashed (its
// content was read after wl was armed and nothing wrote it since). Pages
// the log reports are still hashed, so a rewrite of identical bytes is
// not sent. If wl ever fails, the Tracker drops it and scans check every
// page again (the full hash), which is always correct. It must come
// before any page is recorded.
func (t *Tracker) UseWriteLog(wl WriteLog) error {
	for i := range t.recorded {
		if t.recorded[i].Load() != 0 {
			return ErrRecordedBeforeLog
		}
	}
	t.wlMu.Lock()
	defer t.wlMu.Unlock()
	if err := wl.Arm(); err != nil {
		return fmt.Errorf("dirty: arming the write log: %w", err)
	}
	t.wlog = wl
	return nil
}

// pullWrites moves the pages the log reports into t.written and says
// whether a trusted log decides which pages scans check; frozen (memory
// nothing writes until the scan ends) reads with Peek where the log has
// it. A log that fails is dropped (and the failure logged) for good.
func (t *Tracker) pullWrites(frozen bool) WriteLogStats {
	t.wlMu.Lock()
	defer t.wlMu.Unlock()
	if t.wlog == nil {
		return WriteLogStats{Lost: t.wlLost}
	}
	read := t.wlog.Written
	if p, ok := t.wlog.(WriteLogPeeker); ok && frozen {
		read = p.Peek
	}
	pages, err := read(t.wlBuf[:0])
	if err != nil {
		t.wlog, t.wlLost = nil, err.Error()
		t.log.Warn().Err(err).Msg("dirty: write log lost; scans hash every page from now on")
		return WriteLogStats{Lost: t.wlLost}
	}
	for _, p := range pages {
		if p >= 0 && p < t.pages {
			t.written.set(p)
		}
	}
	t.wlBuf = pages
	n := 0
	for i := range t.written {
		n += bits.OnesCount64(t.written[i].Load())
	}
	return WriteLogStats{Active: true, Written: n}
}

// toCheck returns the pages of word w (pages w*64 to w*64+63) that a scan
// must look at when a write log is trusted: written, marked or never
// recorded.
func (t *Tracker) toCheck(w int) uint64 {
	m := t.written[w].Load() | t.engine[w].Load() | t.background[w].Load() | ^t.recorded[w].Load()
	if last := t.pages - w*64; last < 64 {
		m &= uint64(1)<<last - 1
	}
	return m
}

// eachPage calls fn for the pages of [lo, hi) a scan must look at: every
// one, or with a trusted write log (logged) only those toCheck returns.
func (t *Tracker) eachPage(lo, hi int, logged bool, fn func(p int)) {
	if !logged {
		for p := lo; p < hi; p++ {
			fn(p)
		}
		return
	}
	for w := lo >> 6; w<<6 < hi; w++ {
		for m := t.toCheck(w); m != 0; m &= m - 1 {
			if p := w<<6 + bits.TrailingZeros64(m); p >= lo && p < hi {
				fn(p)
			}
		}
	}
}

// VerifyWriteLog is the full hash as the write log's oracle: it hashes
// every recorded page that the log lets scans skip (no log bit, no mark)
// and returns those whose bytes differ from their record — writes the log
// missed — ascending. Meant for frozen memory right after the stop
// phase's scan, as a debugging check; it costs the hashing the log saves.
// Without a trusted log it returns nothing.
func (t *Tracker) VerifyWriteLog(ctx context.Context) ([]int, error) {
	t.wlMu.Lock()
	active := t.wlog != nil
	t.wlMu.Unlock()
	if !active {
		return nil, nil
	}
	missed := make([][]int, t.workers)
	err := t.forChunks(ctx, t.pages, scanChunk, t.workers, func(w, lo, hi int, _ []byte) {
		for p := lo; p < hi; p++ {
			if t.toCheck(p>>6)&(1<<(p&63)) == 0 && HashPage(t.page(p)) != t.hashes[p].Load() {
				missed[w] = append(missed[w], p)
			}
		}
	})
	if err != nil {
		return nil, fmt.Errorf("dirty: verifying the write log: %w", err)
	}
	out := slices.Concat(missed...)
	slices.Sort(out)
	return out, nil
}
