package stream

import (
	"fmt"
	"hash/crc32"

	"github.com/cespare/xxhash/v2"
)

// readBatch decodes an n-byte PageBatch payload into mem and returns the
// page and zero-page counts and the CRC updated over the payload.
func (r *Reader) readBatch(mem []byte, n uint32, crc uint32) (pages, zeros int, _ uint32, _ error) {
	limit := uint64(len(mem) / PageSize)
	if r.lim.MaxPages != 0 {
		limit = min(limit, uint64(r.lim.MaxPages))
	}
	if n < BatchHeaderSize {
		return 0, 0, 0, fmt.Errorf("%w: %s: %d-byte payload has no page count", ErrMalformed, r.at(), n)
	}
	hb := r.scratch[:]
	if err := r.readFull(hb[:BatchHeaderSize]); err != nil {
		return 0, 0, 0, fmt.Errorf("stream: %s: reading page count: %w", r.at(), err)
	}
	crc = crc32.Update(crc, castagnoli, hb[:BatchHeaderSize])
	count := le.Uint32(hb)
	if count > r.lim.MaxBatchPages {
		return 0, 0, 0, fmt.Errorf("%w: %s: %d pages, limit %d", ErrTooLarge, r.at(), count, r.lim.MaxBatchPages)
	}
	body := uint64(n) - BatchHeaderSize
	if body < uint64(count)*RecordHeaderSize || body > uint64(count)*(RecordHeaderSize+PageSize) {
		return 0, 0, 0, fmt.Errorf("%w: %s: %d pages cannot take %d bytes", ErrMalformed, r.at(), count, body)
	}
	for i := range int(count) {
		if body < RecordHeaderSize {
			return 0, 0, 0, fmt.Errorf("%w: %s: payload ends inside record %d", ErrMalformed, r.at(), i)
		}
		if err := r.readFull(hb); err != nil {
			return 0, 0, 0, fmt.Errorf("stream: %s: reading record %d header: %w", r.at(), i, err)
		}
		body -= RecordHeaderSize
		crc = crc32.Update(crc, castagnoli, hb)
		idx, flags, h := le.Uint32(hb[0:]), hb[4], le.Uint64(hb[8:])
		if flags&^RecordZero != 0 || hb[5] != 0 || hb[6] != 0 || hb[7] != 0 {
			return 0, 0, 0, fmt.Errorf("%w: %s: record %d (page %d): flags %#x, reserved % x", ErrReserved, r.at(), i, idx, flags, hb[5:8])
		}
		if uint64(idx) >= limit {
			return 0, 0, 0, fmt.Errorf("%w: %s: record %d: page %d, destination has %d pages (memory %d, MaxPages %d)",
				ErrPageIndex, r.at(), i, idx, limit, len(mem)/PageSize, r.lim.MaxPages)
		}
		if r.claim != nil && !r.claim(idx) {
			return 0, 0, 0, fmt.Errorf("%w: %s: record %d: page %d", ErrPageClaimed, r.at(), i, idx)
		}
		page := mem[int(idx)*PageSize : (int(idx)+1)*PageSize]
		if flags&RecordZero != 0 {
			if h != zeroHash {
				return 0, 0, 0, fmt.Errorf("%w: %s: record %d: zero page %d carries hash %#016x, want %#016x", ErrPageHash, r.at(), i, idx, h, zeroHash)
			}
			clear(page)
			zeros++
			continue
		}
		if body < PageSize {
			return 0, 0, 0, fmt.Errorf("%w: %s: payload ends inside page %d (record %d)", ErrMalformed, r.at(), idx, i)
		}
		// Hash the page where bufio holds it, then copy it once into mem.
		data, err := r.br.Peek(PageSize)
		if err != nil {
			return 0, 0, 0, fmt.Errorf("stream: %s: reading page %d (record %d): %w", r.at(), idx, i, eofIsUnexpected(err))
		}
		if got := xxhash.Sum64(data); got != h {
			return 0, 0, 0, fmt.Errorf("%w: %s: page %d (record %d): stream says %#016x, data hashes to %#016x", ErrPageHash, r.at(), idx, i, h, got)
		}
		crc = crc32.Update(crc, castagnoli, data)
		copy(page, data)
		r.br.Discard(PageSize)
		r.off += PageSize
		body -= PageSize
	}
	if body != 0 {
		return 0, 0, 0, fmt.Errorf("%w: %s: %d bytes after the last page record", ErrMalformed, r.at(), body)
	}
	return int(count), zeros, crc, nil
}
