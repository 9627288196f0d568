package stream

import (
	"fmt"
	"hash/crc32"
	"sync"

	"github.com/cespare/xxhash/v2"
)

// The parallel PageBatch path (Reader.SetWorkers): the reading goroutine
// only reads a batch's bytes and checks its structure; other goroutines
// check its CRC and its pages' hashes and store the pages, so reading the
// connection overlaps with the per-page work. Pages are stored batch after
// batch, in stream order (a page sent twice ends as the later copy).

// SetWorkers makes Next hand PageBatch checking and storing to up to n
// goroutines (n ≤ 1: none, the default). Next then returns a PageBatch
// once its structure is checked (its counts are exact, its page indices
// within the limit); its CRC and page hashes are checked, and its pages
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
// its structure here and hands the rest to a goroutine. fh is the frame
// header (for the CRC).
func (r *Reader) readBatchParallel(mem []byte, fh []byte, n uint32) (pages, zeros int, _ error) {
	p := r.par
	if err := p.failed(); err != nil {
		return 0, 0, err
	}
	crc := crc32.Update(0, castagnoli, fh) // fh is scratch: the CRC read below overwrites it
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
	recs, zeros, err := r.parseBatch(mem, buf)
	if err != nil {
		p.put(buf)
		return 0, 0, err
	}
	at, prev, done := r.at(), p.prev, make(chan struct{})
	p.prev = done
	p.sem <- struct{}{}
	go func() {
		defer func() { <-p.sem }()
		defer close(done)
		defer p.put(buf)
		// Pages first, then the CRC, as the serial path finds them.
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
		if got := crc32.Update(crc, castagnoli, buf); got != want {
			<-prev
			p.fail(fmt.Errorf("%w: %s: stream has %#08x, content gives %#08x", ErrChecksum, at, want, got))
			return
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
	}()
	return len(recs), zeros, nil
}

// batchRecord is one page record of a payload: where its data starts in
// the payload (-1: a zero page).
type batchRecord struct {
	idx  uint32
	hash uint64
	data int
}

// parseBatch checks a PageBatch payload's structure — its count, each
// record's flags and page index, the lengths — as readBatch does, without
// touching page data.
func (r *Reader) parseBatch(mem, b []byte) ([]batchRecord, int, error) {
	limit := uint64(len(mem) / PageSize)
	if r.lim.MaxPages != 0 {
		limit = min(limit, uint64(r.lim.MaxPages))
	}
	if len(b) < BatchHeaderSize {
		return nil, 0, fmt.Errorf("%w: %s: %d-byte payload has no page count", ErrMalformed, r.at(), len(b))
	}
	count := le.Uint32(b)
	if count > r.lim.MaxBatchPages {
		return nil, 0, fmt.Errorf("%w: %s: %d pages, limit %d", ErrTooLarge, r.at(), count, r.lim.MaxBatchPages)
	}
	body := uint64(len(b)) - BatchHeaderSize
	if body < uint64(count)*RecordHeaderSize || body > uint64(count)*(RecordHeaderSize+PageSize) {
		return nil, 0, fmt.Errorf("%w: %s: %d pages cannot take %d bytes", ErrMalformed, r.at(), count, body)
	}
	recs := make([]batchRecord, 0, count)
	zeros := 0
	at := BatchHeaderSize
	for i := range int(count) {
		if len(b)-at < RecordHeaderSize {
			return nil, 0, fmt.Errorf("%w: %s: payload ends inside record %d", ErrMalformed, r.at(), i)
		}
		hb := b[at : at+RecordHeaderSize]
		at += RecordHeaderSize
		idx, flags, h := le.Uint32(hb[0:]), hb[4], le.Uint64(hb[8:])
		if flags&^RecordZero != 0 || hb[5] != 0 || hb[6] != 0 || hb[7] != 0 {
			return nil, 0, fmt.Errorf("%w: %s: record %d (page %d): flags %#x, reserved % x", ErrReserved, r.at(), i, idx, flags, hb[5:8])
		}
		if uint64(idx) >= limit {
			return nil, 0, fmt.Errorf("%w: %s: record %d: page %d, destination has %d pages (memory %d, MaxPages %d)",
				ErrPageIndex, r.at(), i, idx, limit, len(mem)/PageSize, r.lim.MaxPages)
		}
		if r.claim != nil && !r.claim(idx) {
			return nil, 0, fmt.Errorf("%w: %s: record %d: page %d", ErrPageClaimed, r.at(), i, idx)
		}
		if flags&RecordZero != 0 {
			if h != zeroHash {
				return nil, 0, fmt.Errorf("%w: %s: record %d: zero page %d carries hash %#016x, want %#016x", ErrPageHash, r.at(), i, idx, h, zeroHash)
			}
			recs = append(recs, batchRecord{idx: idx, hash: h, data: -1})
			zeros++
			continue
		}
		if len(b)-at < PageSize {
			return nil, 0, fmt.Errorf("%w: %s: payload ends inside page %d (record %d)", ErrMalformed, r.at(), idx, i)
		}
		recs = append(recs, batchRecord{idx: idx, hash: h, data: at})
		at += PageSize
	}
	if at != len(b) {
		return nil, 0, fmt.Errorf("%w: %s: %d bytes after the last page record", ErrMalformed, r.at(), len(b)-at)
	}
	return recs, zeros, nil
}
