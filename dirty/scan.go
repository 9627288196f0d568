package dirty

import (
	"context"
	"fmt"
	"math/bits"
	"time"
)

// Source says why Scan found a page dirty. When several apply, the page is
// reported under the first in this order.
type Source uint8

const (
	// Engine: the engine wrote the page (MarkWritten); not hashed.
	Engine Source = iota
	// Background: the background re-hash saw it change; not hashed.
	Background
	// Sample: a sampled word differs from the recorded one; not hashed.
	Sample
	// Hash: the samples match but the page's xxhash differs.
	Hash
	// Unrecorded: the page was never recorded, so the destination lacks it.
	// (It is checked before Sample and Hash, which need a recording.)
	Unrecorded
)

// NumSources is the number of Sources, for arrays indexed by Source.
const NumSources = int(Unrecorded) + 1

var sourceNames = [NumSources]string{"engine", "background", "sample", "hash", "unrecorded"}

func (s Source) String() string {
	if int(s) < NumSources {
		return sourceNames[s]
	}
	return fmt.Sprintf("Source(%d)", s)
}

// ScanResult is the outcome of Scan.
type ScanResult struct {
	Dirty       []int           // dirty page indices, ascending
	BySource    [NumSources]int // dirty pages per Source; sums to len(Dirty)
	PagesHashed int             // pages whose full hash was computed
	BytesHashed uint64          // PagesHashed * PageSize
	Duration    time.Duration   // wall time of the scan
	WriteLog    WriteLogStats   // what the write log (UseWriteLog) did
}

// scanChunk is how many pages a Scan worker takes at a time: 1 MiB of
// memory, and a multiple of 64 so that each worker owns whole words of the
// result bitmap.
const scanChunk = 256

// Scan finds the pages that differ from what was recorded: the final dirty
// detection, meant to run with the VM stopped and the engine quiesced (it is
// race-free at any time, but pages written during the scan may or may not be
// caught). Each page is dirty under the first of Engine, Background,
// Unrecorded, Sample and Hash that applies; only pages whose samples match
// are hashed. Scan runs on Options.Workers goroutines and changes no state.
func (t *Tracker) Scan(ctx context.Context) (ScanResult, error) {
	return t.scan(ctx, false)
}

// ScanFrozen is Scan for memory that nothing writes while it runs (the VM
// stopped, the engine quiesced: a migration's stop phase). It hashes pages
// where they are instead of copying each one first, which saves the copy
// on every page it hashes. With writers it would be a data race.
func (t *Tracker) ScanFrozen(ctx context.Context) (ScanResult, error) {
	return t.scan(ctx, true)
}

func (t *Tracker) scan(ctx context.Context, frozen bool) (ScanResult, error) {
	start := time.Now()
	wl := t.pullWrites(frozen)
	found := make([]uint64, (t.pages+63)/64)
	counts := make([][NumSources]int, t.workers)
	hashed := make([]int, t.workers)
	cand := make([][]int, t.workers) // with a Hasher: pages left to hash
	err := t.forChunks(ctx, t.pages, scanChunk, t.workers, func(w, lo, hi int, buf []byte) {
		var n [NumSources]int
		h := 0
		t.eachPage(lo, hi, wl.Active, func(p int) {
			if t.hasher != nil {
				if src, dirty := t.cheapCheck(p); dirty {
					found[p>>6] |= 1 << (p & 63)
					n[src]++
				} else {
					cand[w] = append(cand[w], p)
				}
				return
			}
			src, dirty, didHash := t.check(p, buf, frozen)
			if didHash {
				h++
			}
			if dirty {
				found[p>>6] |= 1 << (p & 63)
				n[src]++
			}
		})
		for s := range n {
			counts[w][s] += n[s]
		}
		hashed[w] += h
	})
	if err != nil {
		return ScanResult{}, fmt.Errorf("dirty: scan: %w", err)
	}
	r := ScanResult{WriteLog: wl}
	for w := range counts {
		for s := range counts[w] {
			r.BySource[s] += counts[w][s]
		}
		r.PagesHashed += hashed[w]
	}
	if t.hasher != nil {
		var all []int
		for _, c := range cand {
			all = append(all, c...)
		}
		n, err := t.hashCandidates(ctx, all, found, &r.BySource)
		if err != nil {
			return ScanResult{}, fmt.Errorf("dirty: scan: %w", err)
		}
		r.PagesHashed += n
	}
	total := 0
	for _, n := range r.BySource {
		total += n
	}
	r.Dirty = make([]int, 0, total)
	for i, word := range found {
		for word != 0 {
			r.Dirty = append(r.Dirty, i*64+bits.TrailingZeros64(word))
			word &= word - 1
		}
	}
	r.BytesHashed = uint64(r.PagesHashed) * PageSize
	r.Duration = time.Since(start)
	t.log.Debug().Int("pages", t.pages).Int("dirty", total).
		Ints("by_source", r.BySource[:]).Int("hashed", r.PagesHashed).Bool("write_log", wl.Active).
		Dur("took", r.Duration).Msg("dirty: scan")
	return r, nil
}

// check decides whether page p is dirty and under which source, using buf
// to copy the page if it must be hashed (unless frozen: then in place);
// hashed says whether it was.
func (t *Tracker) check(p int, buf []byte, frozen bool) (src Source, dirty, hashed bool) {
	switch {
	case t.engine.has(p):
		return Engine, true, false
	case t.background.has(p):
		return Background, true, false
	case !t.recorded.has(p):
		return Unrecorded, true, false
	}
	return t.checkContent(p, buf, frozen)
}

// cheapCheck is check without the full hash: whether page p is dirty by a
// mark, by never having been recorded or by its samples; a page it calls
// clean still needs hashing.
func (t *Tracker) cheapCheck(p int) (src Source, dirty bool) {
	switch {
	case t.engine.has(p):
		return Engine, true
	case t.background.has(p):
		return Background, true
	case !t.recorded.has(p):
		return Unrecorded, true
	case !t.samplesMatch(p):
		return Sample, true
	}
	return Hash, false
}

// checkContent compares recorded page p's current content with its
// recording: samples first, then, if they match, the full hash.
func (t *Tracker) checkContent(p int, buf []byte, frozen bool) (src Source, dirty, hashed bool) {
	if !t.samplesMatch(p) {
		return Sample, true, false
	}
	page := t.page(p)
	if !frozen {
		copyPage(buf, page)
		page = buf
	}
	return Hash, HashPage(page) != t.hashes[p].Load(), true
}

// samplesMatch reports whether page p's sampled words equal its recorded
// samples (true when sampling is disabled).
func (t *Tracker) samplesMatch(p int) bool {
	k := len(t.offsets)
	s := t.samples[p*k : (p+1)*k]
	base := p * PageSize
	for i, off := range t.offsets {
		if loadWord(t.mem, base+off) != s[i].Load() {
			return false
		}
	}
	return true
}
