package stream

import (
	"fmt"
	"hash/crc32"
	"slices"
	"sync"

	"github.com/cespare/xxhash/v2"
)

// The parallel PageBatch path (Reader.SetWorkers): the reading goroutine
// only reads a batch's bytes and checks its structure and CRC (over its
// headers); other goroutines check its pages' hashes and store the pages, so reading the
// connection overlaps with the per-page work. Pages are stored batch after
// batch, in stream order (a page sent twice ends as the later copy).

// SetWorkers makes Next hand PageBatch checking and storing to up to n
// goroutines (n ≤ 1: none, the default). Next then returns a PageBatch
// once its structure and CRC are checked (its counts are exact, its page
// indices within the limit); its page hashes are checked, and its pages
// stored into mem, while the stream is read on. A batch that fails those
// checks makes a later Next (End's at the latest) return the error; as
// ever, on any error mem must be discarded. mem must not be touched by
// the caller until End (or an error) is returned. Call it before the first
// Next.
func (r *Reader) SetWorkers(n int) {
	if n > 1 {
		r.par = &parallel{sem: make(chan struct{}, n), prev: closedChan()}
	}
}

// parallel is the state of the parallel path.
type parallel struct {
	sem  chan struct{} // a slot per batch in flight
	prev chan struct{} // closed once the last dispatched batch is stored
	pool sync.Pool     // payload buffers (*[]byte), each as large as the largest batch it held

	mu  sync.Mutex
	err error // the first failed batch's
}

// buffer returns a buffer of n bytes, reused when one is free.
func (p *parallel) buffer(n int) []byte {
	if b, ok := p.pool.Get().(*[]byte); ok && cap(*b) >= n {
		return (*b)[:n]
	}
	return make([]byte, n)
}

func (p *parallel) put(b []byte) { p.pool.Put(&b) }

func closedChan() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// failed returns the first error of a batch checked in the background.
func (p *parallel) failed() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *parallel) fail(err error) {
	p.mu.Lock()
	if p.err == nil {
		p.err = err
	}
	p.mu.Unlock()
}

// Wait waits until the background work of SetWorkers is over — every
// batch checked and stored or abandoned — and returns the first error it
// found. Next does it before returning End or an error; a caller that
// stops reading before either must call it before it lets mem go.
func (r *Reader) Wait() error {
	if r.par == nil {
		return nil
	}
	return r.par.drain()
}

// drain waits until every dispatched batch is stored and returns the
// first error among them.
func (p *parallel) drain() error {
	<-p.prev
	return p.failed()
}

// readBatchParallel reads an n-byte PageBatch payload and its CRC, checks
// its structure and its CRC (which covers the headers only) here and
// hands the pages' hashes and storing to a goroutine. fh is the frame
// header (for the CRC).
func (r *Reader) readBatchParallel(mem []byte, fh []byte, n uint32) (pages, zeros int, _ error) {
	p := r.par
	if err := p.failed(); err != nil {
		return 0, 0, err
	}
	crc := crc32.Update(0, castagnoli, fh) // fh is scratch: the CRC read below overwrites it
	if n < BatchHeaderSize {
		return 0, 0, fmt.Errorf("%w: %s: %d-byte payload has no page count", ErrMalformed, r.at(), n)
	}
	// A buffer of the batch's size, not of the limit's (16 MiB at the
	// default): a writer's batches are 1 MiB.
	buf := p.buffer(int(n))
	if err := r.readFull(buf); err != nil {
		p.put(buf)
		return 0, 0, fmt.Errorf("stream: %s: reading %d payload bytes: %w", r.at(), n, err)
	}
	c := r.scratch[:FrameTrailerSize]
	if err := r.readFull(c); err != nil {
		p.put(buf)
		return 0, 0, fmt.Errorf("stream: reading CRC of %s: %w", r.at(), err)
	}
	want := le.Uint32(c)
	count := le.Uint32(buf)
	if err := r.checkBatchSize(count, uint64(n)); err != nil {
		p.put(buf)
		return 0, 0, err
	}
	heads := buf[:BatchHeaderSize+int(count)*RecordHeaderSize]
	recs, zeros, err := r.parseRecords(mem, heads[BatchHeaderSize:], uint64(n))
	if err == nil {
		if got := crc32.Update(crc, castagnoli, heads); got != want {
			err = fmt.Errorf("%w: %s: stream has %#08x, content gives %#08x", ErrChecksum, r.at(), want, got)
		}
	}
	if err != nil {
		p.put(buf)
		return 0, 0, err
	}
	recs = slices.Clone(recs) // r.recs is the next batch's
	at, prev, done, stored := r.at(), p.prev, make(chan struct{}), r.stored
	p.prev = done
	p.sem <- struct{}{}
	go func() {
		defer func() { <-p.sem }()
		defer close(done)
		defer p.put(buf)
		for _, rc := range recs {
			if rc.data < 0 {
				continue
			}
			if got := xxhash.Sum64(buf[rc.data : rc.data+PageSize]); got != rc.hash {
				<-prev
				p.fail(fmt.Errorf("%w: %s: page %d: stream says %#016x, data hashes to %#016x", ErrPageHash, at, rc.idx, rc.hash, got))
				return
			}
		}
		<-prev
		if p.failed() != nil {
			return
		}
		for _, rc := range recs {
			page := mem[int(rc.idx)*PageSize : (int(rc.idx)+1)*PageSize]
			if rc.data < 0 {
				clear(page)
			} else {
				copy(page, buf[rc.data:rc.data+PageSize])
			}
		}
		if stored != nil { // before done: the next batch's report comes after
			stored(storedIndices(nil, recs))
		}
	}()
	return len(recs), zeros, nil
}
