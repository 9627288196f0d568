package stream

import (
	"fmt"
	"hash/crc32"

	"github.com/cespare/xxhash/v2"
)

// readChunkPages is how many pages readBatch reads before it checks their
// hashes: 32 pages (128 KiB), so the pages are still in the core's cache
// when they are hashed, and a read from a socket still moves 128 KiB per
// system call.
const readChunkPages = 32

// batchRecord is one page record of a payload: where its data starts in
// the payload (-1: a zero page).
type batchRecord struct {
	idx  uint32
	hash uint64
	data int
}

// readBatch decodes an n-byte PageBatch payload into mem and returns the
// page and zero-page counts and the CRC updated over the record headers.
// The headers are read and checked first (each record's flags, page
// index and claim, the payload's length); then the pages' data is read
// straight into their places in mem (readInto), each page checked against
// its hash once it is there.
func (r *Reader) readBatch(mem []byte, n uint32, crc uint32) (pages, zeros int, _ uint32, _ error) {
	if n < BatchHeaderSize {
		return 0, 0, 0, fmt.Errorf("%w: %s: %d-byte payload has no page count", ErrMalformed, r.at(), n)
	}
	hb := r.scratch[:BatchHeaderSize]
	if err := r.readFull(hb); err != nil {
		return 0, 0, 0, fmt.Errorf("stream: %s: reading page count: %w", r.at(), err)
	}
	crc = crc32.Update(crc, castagnoli, hb)
	count := le.Uint32(hb)
	if err := r.checkBatchSize(count, uint64(n)); err != nil {
		return 0, 0, 0, err
	}
	heads := r.heads(int(count) * RecordHeaderSize)
	if err := r.readFull(heads); err != nil {
		return 0, 0, 0, fmt.Errorf("stream: %s: reading %d record headers: %w", r.at(), count, err)
	}
	crc = crc32.Update(crc, castagnoli, heads)
	recs, zeros, err := r.parseRecords(mem, heads, uint64(n))
	if err != nil {
		return 0, 0, 0, err
	}
	data := r.pageBufs[:0]
	for lo := 0; lo < len(recs); {
		data = data[:0]
		hi := lo
		for ; hi < len(recs) && len(data) < readChunkPages && !sentIn(recs[lo:hi], recs[hi].idx); hi++ {
			page := mem[int(recs[hi].idx)*PageSize : (int(recs[hi].idx)+1)*PageSize]
			if recs[hi].data < 0 {
				clear(page)
				continue
			}
			data = append(data, page)
		}
		if err := r.readInto(data); err != nil {
			return 0, 0, 0, fmt.Errorf("stream: %s: reading pages of records %d … %d: %w", r.at(), lo, hi-1, err)
		}
		for i := lo; i < hi; i++ {
			rc := recs[i]
			if rc.data < 0 {
				continue
			}
			page := mem[int(rc.idx)*PageSize : (int(rc.idx)+1)*PageSize]
			if got := xxhash.Sum64(page); got != rc.hash {
				return 0, 0, 0, fmt.Errorf("%w: %s: page %d (record %d): stream says %#016x, data hashes to %#016x", ErrPageHash, r.at(), rc.idx, i, rc.hash, got)
			}
		}
		lo = hi
	}
	r.pageBufs = data[:0]
	return int(count), zeros, crc, nil
}

// sentIn reports whether page p is among recs': a page sent twice in a
// batch ends a chunk, so that its first copy is read and checked before
// the second lands on it.
func sentIn(recs []batchRecord, p uint32) bool {
	for _, rc := range recs {
		if rc.idx == p {
			return true
		}
	}
	return false
}

// checkBatchSize checks a PageBatch's page count against the limit and
// its n-byte payload's length against the count.
func (r *Reader) checkBatchSize(count uint32, n uint64) error {
	if count > r.lim.MaxBatchPages {
		return fmt.Errorf("%w: %s: %d pages, limit %d", ErrTooLarge, r.at(), count, r.lim.MaxBatchPages)
	}
	body := n - BatchHeaderSize
	if body < uint64(count)*RecordHeaderSize || body > uint64(count)*(RecordHeaderSize+PageSize) {
		return fmt.Errorf("%w: %s: %d pages cannot take %d bytes", ErrMalformed, r.at(), count, body)
	}
	return nil
}

// heads returns the Reader's buffer for a batch's record headers, n
// bytes (at most MaxBatchPages records: checkBatchSize).
func (r *Reader) heads(n int) []byte {
	if cap(r.headBuf) < n {
		r.headBuf = make([]byte, n)
	}
	return r.headBuf[:n]
}

// parseRecords checks a PageBatch's record headers — each record's flags,
// reserved bytes, page index, a zero record's hash — and that an n-byte
// payload holds exactly the headers and the data of the non-zero
// records, and then claims the pages (SetClaim). It returns the records,
// with where each one's data starts in the payload, and the zero-page
// count.
func (r *Reader) parseRecords(mem, heads []byte, n uint64) ([]batchRecord, int, error) {
	limit := uint64(len(mem) / PageSize)
	if r.lim.MaxPages != 0 {
		limit = min(limit, uint64(r.lim.MaxPages))
	}
	count := len(heads) / RecordHeaderSize
	recs := r.recs[:0]
	zeros := 0
	at := uint64(BatchHeaderSize + len(heads))
	for i := range count {
		hb := heads[i*RecordHeaderSize:][:RecordHeaderSize]
		idx, flags, h := le.Uint32(hb[0:]), hb[4], le.Uint64(hb[8:])
		if flags&^RecordZero != 0 || hb[5] != 0 || hb[6] != 0 || hb[7] != 0 {
			return nil, 0, fmt.Errorf("%w: %s: record %d (page %d): flags %#x, reserved % x", ErrReserved, r.at(), i, idx, flags, hb[5:8])
		}
		if uint64(idx) >= limit {
			return nil, 0, fmt.Errorf("%w: %s: record %d: page %d, destination has %d pages (memory %d, MaxPages %d)",
				ErrPageIndex, r.at(), i, idx, limit, len(mem)/PageSize, r.lim.MaxPages)
		}
		if flags&RecordZero != 0 {
			if h != zeroHash {
				return nil, 0, fmt.Errorf("%w: %s: record %d: zero page %d carries hash %#016x, want %#016x", ErrPageHash, r.at(), i, idx, h, zeroHash)
			}
			recs = append(recs, batchRecord{idx: idx, hash: h, data: -1})
			zeros++
			continue
		}
		recs = append(recs, batchRecord{idx: idx, hash: h, data: int(at)})
		at += PageSize
	}
	r.recs = recs
	if at != n {
		return nil, 0, fmt.Errorf("%w: %s: %d records of which %d zero take %d bytes, payload has %d", ErrMalformed, r.at(), count, zeros, at, n)
	}
	// Claimed only once the whole batch is known to be well formed.
	if r.claim != nil {
		for i, rc := range recs {
			if !r.claim(rc.idx) {
				return nil, 0, fmt.Errorf("%w: %s: record %d: page %d", ErrPageClaimed, r.at(), i, rc.idx)
			}
		}
	}
	return recs, zeros, nil
}
