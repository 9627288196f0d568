package dirty

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// ScanChunk is one piece of a streamed scan (ScanFrozenStream): the dirty
// pages of a range of memory, ascending, each with the xxhash64 of its
// current bytes.
type ScanChunk struct {
	Dirty  []uint32
	Hashes []uint64 // Hashes[i] is HashPage of page Dirty[i]
}

// DefaultStreamChunk is ScanFrozenStream's chunk when asked for 0 pages:
// 8 MiB of memory, a few thousand pages, so the first chunk's pages are
// on their way early and each chunk is still worth a worker's hand-off.
const DefaultStreamChunk = 2048

// ScanFrozenStream is ScanFrozen delivered in pieces, so the caller can
// send the dirty pages of one piece while the workers scan the next: the
// final scan and the transfer of a stop phase overlap. Memory is divided
// into chunks of chunkPages pages (0: DefaultStreamChunk) that the
// workers scan in turn; fn receives each chunk's ScanChunk in page order,
// on the caller's goroutine, as soon as it and every chunk before it are
// scanned. Every dirty page comes with its hash — computed by the scan
// where the check needed it, and by the worker otherwise — so the caller
// hashes nothing. Nothing may write mem while it runs (see ScanFrozen);
// the chunk's slices are reused after fn returns. An error from fn stops
// the scan and is returned. The result has the counts and timing of
// ScanFrozen (Dirty is nil: the chunks had them); Duration ends when the
// last chunk is scanned, before fn has taken it. A Tracker with a Hasher
// hashes on the CPU here. Unlike ScanFrozen it hashes every recorded page
// that no mark covers, samples or not (PagesHashed counts them): a page
// the samples would prove dirty must be hashed for sending all the same.
func (t *Tracker) ScanFrozenStream(ctx context.Context, chunkPages int, fn func(ScanChunk) error) (ScanResult, error) {
	start := time.Now()
	wl := t.pullWrites(true)
	if chunkPages <= 0 {
		chunkPages = DefaultStreamChunk
	}
	chunks := (t.pages + chunkPages - 1) / chunkPages
	type slot struct {
		c      ScanChunk
		n      [NumSources]int
		hashed int
		ready  chan struct{}
	}
	slots := make([]slot, chunks)
	for i := range slots {
		slots[i].ready = make(chan struct{})
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var next atomic.Int64
	var scanned atomic.Int64 // chunks done
	var end atomic.Int64     // unix ns when the last chunk was scanned
	var wg sync.WaitGroup
	for range max(1, min(t.workers, chunks)) {
		wg.Go(func() {
			for sctx.Err() == nil {
				c := int(next.Add(1) - 1)
				if c >= chunks {
					return
				}
				s := &slots[c]
				t.scanChunk(c*chunkPages, min((c+1)*chunkPages, t.pages), wl.Active, &s.c, &s.n, &s.hashed)
				close(s.ready)
				if int(scanned.Add(1)) == chunks {
					end.Store(time.Now().UnixNano())
				}
			}
		})
	}
	r := ScanResult{WriteLog: wl}
	var err error
	for c := range slots {
		s := &slots[c]
		select {
		case <-s.ready:
		case <-ctx.Done():
			err = ctx.Err()
		}
		if err != nil {
			break
		}
		for src := range s.n {
			r.BySource[src] += s.n[src]
		}
		r.PagesHashed += s.hashed
		if len(s.c.Dirty) > 0 {
			if err = fn(s.c); err != nil {
				break
			}
		}
		s.c = ScanChunk{} // let it go
	}
	cancel()
	wg.Wait()
	if err != nil {
		return ScanResult{}, fmt.Errorf("dirty: streamed scan: %w", err)
	}
	r.BytesHashed = uint64(r.PagesHashed) * PageSize
	r.Duration = time.Unix(0, end.Load()).Sub(start)
	t.log.Debug().Int("pages", t.pages).Ints("by_source", r.BySource[:]).Int("hashed", r.PagesHashed).
		Bool("write_log", wl.Active).Dur("took", r.Duration).Msg("dirty: streamed scan")
	return r, nil
}

// scanChunk checks pages [lo, hi) of frozen memory into c (dirty pages
// and their hashes), n (by source) and hashed (pages the checks hashed);
// with logged, only the pages a trusted write log leaves to check.
func (t *Tracker) scanChunk(lo, hi int, logged bool, c *ScanChunk, n *[NumSources]int, hashed *int) {
	t.eachPage(lo, hi, logged, func(p int) {
		var src Source
		var h uint64
		switch {
		case t.engine.has(p):
			src = Engine
		case t.background.has(p):
			src = Background
		case !t.recorded.has(p):
			src = Unrecorded
		default:
			// Every dirty page is hashed for the stream anyway, so the
			// sample pre-filter would save nothing here: hash first (one
			// sequential read of the page instead of scattered sample
			// loads, then the read), and ask the samples only of a page
			// found dirty, to say which source saw it.
			h = HashPage(t.page(p))
			*hashed++
			if h == t.hashes[p].Load() {
				return
			}
			src = Hash
			if !t.samplesMatch(p) {
				src = Sample
			}
		}
		if src != Hash && src != Sample {
			h = HashPage(t.page(p)) // for the stream: the sender hashes nothing
		}
		n[src]++
		c.Dirty = append(c.Dirty, uint32(p))
		c.Hashes = append(c.Hashes, h)
	})
}
