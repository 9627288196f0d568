package precopy

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/gmig-dev/gmig/precopy/stream"
)

// The stop phase on several streams (docs/migration-stream.md §3.3 and
// §8): a Source given extra connections (AddStreams) spreads the stop
// phase's pages over them and its own, batch by batch, round-robin; each
// page goes on exactly one stream. The aperture's dirty pages and, on the
// NVIDIA back end, the changed device-local pages share the round-robin:
// the local pages are read from the GPU in chunks on a goroutine of their
// own while the aperture is scanned, and each chunk's batches go to the
// next streams as soon as it is read (local_stop.go). Each extra stream
// is a stream of its own — header, ShardHeader, PageBatch*, End — and the
// stop Meta on the main stream says how many there are. The destination
// reads them all at once (receive_shards.go) and restores the device from
// the main stream only once every stream has ended.

// DefaultStreams is the stop phase's stream count when Options.Streams is
// zero: half the cores, at most MaxDefaultStreams — on the 16-core device
// machine loopback TCP carries 3.1, 6.2, 7.4 and 9.7 GB/s on 1, 2, 4 and
// 8 streams (the design brief's measurement), each stream's sender and
// receiver taking a core of their own; on 2 cores that leaves one stream,
// where two gained at light load and lost at heavy load
// (docs/migration-stream.md §3.3).
func DefaultStreams() int { return min(MaxDefaultStreams, max(1, runtime.NumCPU()/2)) }

// MaxDefaultStreams is the most streams DefaultStreams gives, and the
// most a destination takes unless told otherwise (orchestrator): 8, where
// the device machine's loopback stops gaining (9.7 GB/s on 8 streams).
const MaxDefaultStreams = 8

// shardOut is one extra stream of a Source.
type shardOut struct {
	conn io.ReadWriter
	w    *stream.Writer
}

// AddStreams gives the Source extra connections to the destination for
// its stop phase: each gets its stream header and ShardHeader now; Stop
// spreads the stop phase's pages over them and the main connection. It is
// called at most once, before Precopy or during the live phase's wait
// (not while Precopy or Stop runs), with at most stream.MaxShards−1
// connections; the caller owns them, as it owns the main one, and closes
// them after Stop, Rollback or Close.
func (s *Source) AddStreams(conns ...io.ReadWriter) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case s.state != srcLive:
		return fmt.Errorf("precopy: AddStreams on a %s source", s.state)
	case s.shards != nil:
		return fmt.Errorf("precopy: AddStreams called twice")
	case len(conns)+1 > stream.MaxShards:
		return fmt.Errorf("precopy: %d streams, at most %d", len(conns)+1, stream.MaxShards)
	case len(conns) == 0:
		return nil
	}
	var tok [8]byte
	_, _ = rand.Read(tok[:])
	token := binary.LittleEndian.Uint64(tok[:])
	shards := make([]*shardOut, len(conns))
	for i, c := range conns {
		w, err := stream.NewWriter(c)
		if err == nil {
			err = w.WriteShard(stream.Shard{Token: token, Index: i + 1, Count: len(conns) + 1})
		}
		if err != nil {
			return fmt.Errorf("precopy: opening stream %d: %w", i+1, err)
		}
		shards[i] = &shardOut{conn: c, w: w}
	}
	s.shards, s.token = shards, token
	s.log.Info().Int("streams", len(conns)+1).Msg("stop phase spread over several streams")
	return nil
}

// streams is how many streams the stop phase's pages go on.
func (s *Source) streams() int { return len(s.shards) + 1 }

// eachConnLocked calls fn with the main connection and every extra one.
func (s *Source) eachConnLocked(fn func(conn any)) {
	fn(s.conn)
	for _, sh := range s.shards {
		fn(sh.conn)
	}
}

// eachConn is eachConnLocked for a caller without s.mu.
func (s *Source) eachConn(fn func(conn any)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.eachConnLocked(fn)
}

// watchAll is watch over every connection of the Source.
func (s *Source) watchAll(ctx context.Context) (stop func()) {
	var stops []func() bool
	s.eachConn(func(c any) { stops = append(stops, watch(ctx, c)) })
	return func() {
		for _, st := range stops {
			st()
		}
	}
}

// pageJob is one piece of the stop phase's pages for one stream: hashes
// nil, or the hash of each page as memory holds it (frozen). copies nil:
// the pages are written from the partition (WritePages); otherwise they
// are copies already made, len(idx) pages back to back (WriteCopies:
// device-local pages read from the GPU, local_stop.go), hashed by the
// writer when hashes is nil. done, if set, is called once the job was
// written, or dropped after a failure, so that its producer may reuse
// copies' buffer.
type pageJob struct {
	idx    []uint32
	hashes []uint64
	copies []byte
	done   func()
}

// finish tells j's producer that j is written or dropped.
func (j pageJob) finish() {
	if j.done != nil {
		j.done()
	}
}

// spread runs the stop phase's page sends on every stream at once:
// produce (nil: none) calls send with pages (and, or nil, their hashes)
// as it finds them; send gathers them into batches (batcher) and hands
// each full batch to the next stream in turn, round-robin (the next with
// room in its queue, if that one has none), each stream's
// sender writing on its own goroutine; once produce returns, what is left
// is split evenly over the streams. With own, send copies what it is
// given (the caller reuses it). send is for produce's goroutine alone.
//
// side (nil: none) runs beside produce, on a goroutine of its own, and
// hands whole jobs to the next stream in turn through direct, which any
// goroutine may call until side returns: the device-local pages read from
// the GPU while the aperture's scan runs (local_stop.go). spread waits for
// both before the streams end.
//
// Then each extra stream ends (End) unless anything failed; the main
// stream goes on with the stop phase's tail. It returns the first error of
// produce, side or a sender; a sender's error, or side's, interrupts every
// connection's writes, so the others stop too, and send and direct return
// it to their callers.
func (s *Source) spread(own bool, produce func(send func(idx []uint32, hashes []uint64) error) error,
	side func(direct func(pageJob) error) error) error {
	n := s.streams()
	jobs := make([]chan pageJob, n)
	errs := make(chan error, n)
	var mu sync.Mutex
	var first error
	fail := func(err error) {
		mu.Lock()
		defer mu.Unlock()
		if first == nil {
			first = err
			s.eachConn(interruptWrites)
		}
	}
	firstErr := func() error {
		mu.Lock()
		defer mu.Unlock()
		return first
	}
	for i := range n {
		jobs[i] = make(chan pageJob, 2)
		go func() {
			errs <- s.sendShard(i, jobs[i], fail, firstErr)
		}()
	}
	// Round-robin over the streams, shared by send and direct, passing
	// over a stream whose queue is full while another has room: one slow
	// stream (a big batch of the aperture's, a slow receiver) does not hold
	// up the others' next jobs.
	var next atomic.Uint32
	to := func(j pageJob) {
		at := next.Add(1) - 1
		for k := range uint32(n) {
			select {
			case jobs[(at+k)%uint32(n)] <- j:
				return
			default:
			}
		}
		jobs[at%uint32(n)] <- j
	}
	sideErr := make(chan error, 1)
	if side != nil {
		go func() {
			err := side(func(j pageJob) error {
				if err := firstErr(); err != nil {
					j.finish()
					return err
				}
				to(j)
				return nil
			})
			if err != nil {
				fail(err) // the scan and the other streams stop at once
			}
			sideErr <- err
		}()
	}
	b := batcher{size: stream.DefaultBatchPages, own: own, out: to}
	var err error
	if produce != nil {
		err = produce(func(idx []uint32, hashes []uint64) error {
			if err := firstErr(); err != nil {
				return err
			}
			b.add(idx, hashes)
			return nil
		})
	}
	if err != nil {
		fail(err) // no stream ends as if it were whole; side stops at its next job
	}
	if side != nil {
		if e := <-sideErr; e != nil && err == nil {
			err = e
		}
	}
	if err == nil {
		b.finish(n)
	}
	for _, j := range jobs {
		close(j)
	}
	for range n {
		if e := <-errs; e != nil && err == nil {
			err = e
		}
	}
	if e := firstErr(); e != nil {
		return e
	}
	return err
}

// batcher gathers the stop phase's pages, in the order they are found,
// into batches of size pages for spread, so that each stream writes (and
// its reader reads) whole batches — a batch is DefaultBatchPages, 1 MiB of
// pages — however few pages each scanned chunk of memory had dirty (a
// sparse stop phase: 1 % of pages is some 20 pages a chunk). out takes
// each batch; finish splits what is left over the streams.
type batcher struct {
	size int
	own  bool // copy what add is given (the caller reuses it)
	out  func(pageJob)
	pend pageJob
}

// add takes pages idx and, or nil, their hashes.
func (b *batcher) add(idx []uint32, hashes []uint64) {
	if len(b.pend.idx) > 0 && (hashes == nil) != (b.pend.hashes == nil) {
		b.flush() // a batch's pages all have hashes or none has
	}
	for len(idx) > 0 {
		if len(b.pend.idx) == 0 && len(idx) >= b.size && !b.own {
			b.out(cut(&idx, &hashes, b.size)) // straight from the caller's slices
			continue
		}
		if b.pend.idx == nil {
			b.pend.idx = make([]uint32, 0, b.size)
			if hashes != nil {
				b.pend.hashes = make([]uint64, 0, b.size)
			}
		}
		j := cut(&idx, &hashes, b.size-len(b.pend.idx))
		b.pend.idx = append(b.pend.idx, j.idx...)
		if j.hashes != nil {
			b.pend.hashes = append(b.pend.hashes, j.hashes...)
		}
		if len(b.pend.idx) == b.size {
			b.flush()
		}
	}
}

// flush hands on the pages gathered so far.
func (b *batcher) flush() {
	if len(b.pend.idx) > 0 {
		b.out(b.pend)
	}
	b.pend = pageJob{}
}

// finish hands on what is left in n pieces of about the same size (fewer
// if it is fewer pages), so that every stream ends at about the same time.
func (b *batcher) finish(n int) {
	rest := b.pend
	b.pend = pageJob{}
	piece := max(1, (len(rest.idx)+n-1)/n)
	for len(rest.idx) > 0 {
		b.out(cut(&rest.idx, &rest.hashes, piece))
	}
}

// cut takes up to k pages off the front of *idx and *hashes (nil stays
// nil).
func cut(idx *[]uint32, hashes *[]uint64, k int) pageJob {
	k = min(k, len(*idx))
	j := pageJob{idx: (*idx)[:k:k]}
	*idx = (*idx)[k:]
	if *hashes != nil {
		j.hashes = (*hashes)[:k:k]
		*hashes = (*hashes)[k:]
	}
	return j
}

// sendShard writes the jobs for stream i (0: the main one) until jobs is
// closed, then ends an extra stream unless the phase failed. After a
// failure (its own, reported through fail, or another's: failed) it
// drains jobs without writing. Every job is finished either way.
func (s *Source) sendShard(i int, jobs <-chan pageJob, fail func(error), failed func() error) error {
	var err error
	w := s.w
	if i > 0 {
		w = s.shards[i-1].w
	}
	for j := range jobs {
		if err != nil || failed() != nil {
			j.finish()
			continue
		}
		var st stream.Stats
		if j.copies != nil {
			st, err = w.WriteCopies(j.idx, j.copies, j.hashes)
		} else {
			st, err = w.WritePages(j.idx, s.mem, j.hashes)
		}
		j.finish()
		if i == 0 {
			s.noteSent()
		} else {
			s.shardPages.Add(st.Pages)
			s.shardBytes.Add(st.Bytes)
			if j.copies != nil {
				s.shardLocal.Add(st.Pages)
			}
		}
		if err != nil {
			err = fmt.Errorf("stream %d: %w", i, err)
			fail(err)
		}
	}
	if err == nil && i > 0 && failed() == nil {
		before := w.Stats().Bytes
		if err = w.Close(); err != nil {
			err = fmt.Errorf("ending stream %d: %w", i, err)
			fail(err)
		}
		s.shardBytes.Add(w.Stats().Bytes - before)
	}
	return err
}
