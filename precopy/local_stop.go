package precopy

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/precopy/stream"
)

// The stop phase's device-local pages (local.go). On the software back
// end the engine-marked pages go on the main stream after the aperture's,
// straight from the frozen memory. On the NVIDIA back end the work is
// pipelined three ways, all inside the downtime:
//   - which pages changed: the GPU hash (localPages.Changed) starts on a
//     goroutine of its own as soon as the engine is quiesced, beside the
//     CPU's scan of the aperture (stop-and-copy sends every page and
//     hashes none);
//   - reading them: a reader copies the changed pages from the GPU
//     localReadPages at a time into a ring of localReadBuffers buffers
//     made (and faulted in) during the pre-copy, and reads the next chunk
//     while the streams write the last;
//   - sending them: each chunk is cut into batches that go, round-robin,
//     to every stream the stop phase has (spread's direct jobs, beside
//     the aperture's batches); a buffer goes back to the ring once every
//     batch cut from it is written, or dropped after a failure.

// localReadPages is how many changed device-local pages the stop phase
// reads from the GPU at a time: 2048 pages, 8 MiB, eight stream batches —
// each read has a fixed cost (a gather launch, a copy to the host and
// their synchronizations), small against moving 8 MiB over PCIe, and the
// streams get their first batches after one chunk's read. (On the 2-core
// machine's CUDA model, where reads and writes share the cores and a read
// has no fixed cost to spread, 256-page reads were faster: the chunk size
// is for the GPU; docs/nvidia.md has the figures.)
const localReadPages = 2048

// localReadBuffers is the ring's size: while one buffer is read into,
// up to three chunks already read are being written; 4 buffers of
// localReadPages pages are 32 MiB per Source.
const localReadBuffers = 4

// localJobPages is how many pages of a chunk one stream writes at a time:
// a stream batch (a variable so that tests can spread a few pages over
// several streams).
var localJobPages = stream.DefaultBatchPages

// localHashPages is how many device-local pages the stop phase hashes on
// the GPU at a time (ChangedIn): 1 GiB. 16 GiB take some 6 ms to hash on
// the H200; range by range, the first changed pages are read and sent
// after the first range's 0.4 ms while the GPU hashes on, at the price of
// a call per range (a round trip to a GPU worker, two synchronizations).
// A variable for the tests alone.
var localHashPages = 1 << 18

// localStop is the stop phase's changed device-local pages on the NVIDIA
// back end, found range by range on a goroutine of their own.
type localStop struct {
	found  chan []int    // each range's changed pages, ascending; closed after the last range or a failure
	done   chan struct{} // closed once pages, err and hashed are final
	pages  []int         // every changed page, ascending
	err    error
	hashed time.Duration // from the start to the last range's answer
	src    dirty.Source  // what found them, for the report
}

// startLocalStop starts finding the device-local pages to send at the
// stop (the vGPU is quiesced): nil for the software back end or without
// local memory; every page for stop-and-copy; else those whose GPU hash
// changed, localHashPages at a time, on a goroutine of its own that hands
// each range's pages on as it finds them.
func (s *Source) startLocalStop() *localStop {
	l := s.local
	if l == nil || l.marks != nil {
		return nil
	}
	n := l.pages()
	ranges := (n + localHashPages - 1) / localHashPages
	ls := &localStop{found: make(chan []int, ranges+1), done: make(chan struct{})}
	if s.opts.Strategy == StopCopy {
		ls.pages, ls.src = make([]int, n), dirty.Unrecorded
		for i := range ls.pages {
			ls.pages[i] = i
		}
		ls.found <- ls.pages
		close(ls.found)
		close(ls.done)
		return ls
	}
	ls.src = dirty.Hash
	go func() {
		start := time.Now()
		defer close(ls.done)
		defer close(ls.found)
		for first := 0; first < n; first += localHashPages {
			k := min(localHashPages, n-first)
			var part []int
			if err := l.withGPU(func(g localPages) (err error) { part, err = g.ChangedIn(first, k); return err }); err != nil {
				ls.err = fmt.Errorf("precopy: hashing device-local pages [%d, +%d): %w", first, k, err)
				return
			}
			ls.pages = append(ls.pages, part...)
			if len(part) > 0 {
				ls.found <- part // room for every range: never blocks
			}
		}
		ls.hashed = time.Since(start)
	}()
	return ls
}

// wait returns the pages once they are all found; nil ls has none.
func (ls *localStop) wait() ([]int, error) {
	if ls == nil {
		return nil, nil
	}
	<-ls.done
	return ls.pages, ls.err
}

// readBuffers is a localPages that hands out buffers its Snapshot and
// Read fill in place (a GPU worker's shared bulk buffer, where the
// worker's copy from the GPU lands: no copy out of it in this process).
type readBuffers interface {
	ReadBuffers(n, size int) ([][]byte, error)
}

// hashedReader is a localPages whose reads give each page's xxhash64 as
// the stop phase's hash (ChangedIn) found it on the GPU
// (nvidia.LocalTracker.ReadHashed): the streams then send the pages with
// those hashes and hash nothing. ok false: buf is not where it reads with
// hashes, nothing was read.
type hashedReader interface {
	ReadHashed(pages []int, buf []byte, sums []uint64) (ok bool, err error)
}

// readChunk reads pages into buf and, where the reader gives them (a
// hashedReader) and withSums (the pages were found by the GPU's hash: it
// has their hashes of the stop), their hashes into sums: it reports
// whether it did.
func (l *localState) readChunk(pages []int, buf []byte, sums []uint64, withSums bool) (hashed bool, err error) {
	err = l.withGPU(func(g localPages) error {
		if hr, ok := g.(hashedReader); ok && withSums {
			ok, err := hr.ReadHashed(pages, buf, sums)
			if ok || err != nil {
				hashed = ok
				return err
			}
		}
		return g.Read(pages, buf)
	})
	return hashed, err
}

// prepareLocalStop makes the read buffers of device-local pages (NVIDIA
// back end) for the pre-copy's snapshots and the stop phase's reads: the
// reader's own (ReadBuffers) where it has them, else buffers of this
// process with a byte of every page written, so the downtime takes no
// page fault on them. The pre-copy calls it.
func (s *Source) prepareLocalStop() {
	l := s.local
	if l == nil || l.marks != nil || s.localBufs != nil {
		return
	}
	size := min(localReadPages, l.pages()) * dirty.PageSize
	_ = l.withGPU(func(g localPages) error {
		rb, ok := g.(readBuffers)
		if !ok {
			return nil
		}
		bufs, err := rb.ReadBuffers(localReadBuffers, size)
		if err != nil {
			s.log.Warn().Err(err).Msg("the GPU's reader has no read buffers for this migration; reading through buffers of gmigd's own")
			return nil
		}
		s.localBufs = bufs
		return nil
	})
	if s.localBufs != nil {
		return
	}
	s.localBufs = make([][]byte, localReadBuffers)
	for i := range s.localBufs {
		b := make([]byte, size)
		for off := 0; off < size; off += dirty.PageSize {
			b[off] = 1
		}
		s.localBufs[i] = b
	}
}

// readLocal reads the pages ls finds from the GPU, range by range as the
// hash finds them, chunk by chunk (at most localReadPages) into the ring
// of read buffers, and hands each chunk on to out as jobs of
// localJobPages pages, whose done returns the chunk's buffer to the ring
// once every job of it was written or dropped. It returns once every
// chunk was handed on, or at the first error (the hash's, out's, a
// read's, ctx's).
func (s *Source) readLocal(ctx context.Context, ls *localStop, out func(pageJob) error) error {
	start := time.Now()
	var first, hashed time.Duration    // until the first changed pages were known; all
	var reading, waiting time.Duration // in the GPU's reads; for a free buffer
	var handing time.Duration          // handing jobs on to the streams (full queues)
	read, withSums := 0, 0             // pages read; of them, with the GPU's hashes
	defer func() {
		s.log.Info().Int("pages", read).Int("gpu_hashed", withSums).Dur("first_found", first).Dur("hashed", hashed).
			Dur("reading", reading).Dur("buffer_wait", waiting).Dur("stream_wait", handing).
			Dur("total", time.Since(start)).Msg("device-local pages read at the stop")
	}()
	l := s.local
	s.prepareLocalStop() // already made by the pre-copy, but for a Stop without one
	free := make(chan []byte, len(s.localBufs))
	for _, b := range s.localBufs {
		free <- b
	}
	for part := range ls.found {
		if read == 0 {
			first = time.Since(start)
		}
		for lo := 0; lo < len(part); lo += localReadPages {
			if err := s.check(ctx); err != nil {
				return err
			}
			chunk := part[lo:min(len(part), lo+localReadPages)]
			var buf []byte
			t := time.Now()
			select {
			case buf = <-free:
			case <-ctx.Done():
				return ctx.Err()
			}
			waiting += time.Since(t)
			t = time.Now()
			sums := make([]uint64, len(chunk))
			gpuSums, err := l.readChunk(chunk, buf, sums, ls.src == dirty.Hash)
			if err != nil {
				return fmt.Errorf("precopy: reading %d device-local pages from the GPU: %w", len(chunk), err)
			}
			if !gpuSums {
				sums = nil // the streams hash them
			} else {
				withSums += len(chunk)
			}
			reading += time.Since(t)
			read += len(chunk)
			idx := make([]uint32, len(chunk))
			for i, p := range chunk {
				idx[i] = uint32(l.first + p)
			}
			left := new(atomic.Int32)
			left.Store(int32((len(chunk) + localJobPages - 1) / localJobPages))
			done := func() {
				if left.Add(-1) == 0 {
					free <- buf
				}
			}
			t = time.Now()
			for j := 0; j < len(chunk); j += localJobPages {
				k := min(localJobPages, len(chunk)-j)
				job := pageJob{idx: idx[j : j+k : j+k], done: done,
					copies: buf[j*dirty.PageSize : (j+k)*dirty.PageSize]}
				if sums != nil {
					job.hashes = sums[j : j+k : j+k]
				}
				if err := out(job); err != nil {
					return err
				}
			}
			handing += time.Since(t)
		}
	}
	pages, err := ls.wait()
	if err != nil {
		return err
	}
	hashed = ls.hashed
	s.logLocalStop(len(pages))
	return nil
}

// sendLocalStop sends, with the VM stopped, the local pages that changed
// since they were sent (every one for stop-and-copy, which sent none) and
// counts them in rep: engine-marked pages straight from the frozen memory
// on the software back end, hashing none; on the NVIDIA back end the pages
// ls found (whose GPU hash changed, dirty.Hash), read back over PCIe —
// unless sent says they went already, spread with the aperture's pages
// over several streams. Here they go on the main stream, each chunk's
// read overlapping the write of the chunk before.
func (s *Source) sendLocalStop(ctx context.Context, rep *Report, ls *localStop, sent bool) error {
	l := s.local
	switch {
	case l == nil:
		return nil
	case l.marks == nil:
		if !sent {
			if err := s.spread(false, nil, s.spreadLocal(ctx, ls)); err != nil {
				return err
			}
		}
		pages, err := ls.wait()
		if err != nil {
			return err
		}
		countLocalStop(rep, l, len(pages), ls.src)
		return nil
	}
	pages, src := l.marks.Marked(), dirty.Engine
	if s.opts.Strategy == StopCopy {
		pages, src = make([]int, l.pages()), dirty.Unrecorded
		for i := range pages {
			pages[i] = i
		}
	}
	countLocalStop(rep, l, len(pages), src)
	s.logLocalStop(len(pages))
	idx := make([]uint32, len(pages))
	for i, p := range pages {
		idx[i] = uint32(l.first + p)
	}
	_, err := s.w.WritePages(idx, l.dev, nil)
	s.noteSent()
	return err
}

// countLocalStop adds the stop phase's n device-local pages, found by
// src, to rep.
func countLocalStop(rep *Report, l *localState, n int, src dirty.Source) {
	rep.Stop.LocalPages = n
	rep.Stop.LocalMethod = l.method
	rep.Stop.DirtyPages += n
	rep.Stop.BySource[src] += n
}

// spreadLocal is spread's side for the NVIDIA back end's local pages
// (nil without them): it waits for the pages ls finds, then reads them
// and hands them on (readLocal).
func (s *Source) spreadLocal(ctx context.Context, ls *localStop) func(direct func(pageJob) error) error {
	if ls == nil {
		return nil
	}
	return func(direct func(pageJob) error) error { return s.readLocal(ctx, ls, direct) }
}

// logLocalStop says how many device-local pages the stop phase sends.
func (s *Source) logLocalStop(dirtyPages int) {
	s.log.Info().Str("method", s.local.method).Int("pages", s.local.pages()).Int("dirty", dirtyPages).
		Msg("device-local pages to send at the stop")
}
