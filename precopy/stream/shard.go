package stream

import (
	"errors"
	"fmt"
	"hash/crc32"
)

// ShardHeader payload (docs/migration-stream.md §3.3).
const (
	// ShardSize is a ShardHeader section's payload: u64 token, u16 index, u16
	// count, u32 reserved (0).
	ShardSize = 16
	// MaxShards is the most streams one stop phase may be spread over:
	// the count a ShardHeader section may name. 64 is eight times the most
	// streams a loopback link gains from (docs/migration-stream.md §3.3).
	MaxShards = 64
)

// Shard opens a shard stream: a stream that carries a share of another
// stream's stop-phase pages (docs/migration-stream.md §3.3), as its
// ShardHeader section says. The main stream is index 0 and has none; shard streams are 1 …
// Count−1. Token is the same in every stream of one migration and names
// it.
type Shard struct {
	Token uint64
	Index int
	Count int
}

// errShard is what ParseShard refuses, wrapped in ErrMalformed or
// ErrReserved.
var errShard = errors.New("stream: bad ShardHeader payload")

// AppendShard appends s's payload to b.
func AppendShard(b []byte, s Shard) []byte {
	b = le.AppendUint64(b, s.Token)
	b = le.AppendUint16(b, uint16(s.Index))
	b = le.AppendUint16(b, uint16(s.Count))
	return le.AppendUint32(b, 0)
}

// ParseShard decodes and checks a ShardHeader payload: exactly ShardSize bytes,
// a count of 2 … MaxShards, an index of 1 … count−1, reserved zero.
func ParseShard(b []byte) (Shard, error) {
	if len(b) != ShardSize {
		return Shard{}, fmt.Errorf("%w: %w: %d bytes, want %d", ErrMalformed, errShard, len(b), ShardSize)
	}
	s := Shard{Token: le.Uint64(b), Index: int(le.Uint16(b[8:])), Count: int(le.Uint16(b[10:]))}
	if res := le.Uint32(b[12:]); res != 0 {
		return Shard{}, fmt.Errorf("%w: %w: reserved %#x", ErrReserved, errShard, res)
	}
	if s.Count < 2 || s.Count > MaxShards || s.Index < 1 || s.Index >= s.Count {
		return Shard{}, fmt.Errorf("%w: %w: stream %d of %d (want 1 … count−1 of 2 … %d)",
			ErrMalformed, errShard, s.Index, s.Count, MaxShards)
	}
	return s, nil
}

// WriteShard makes the stream a shard stream: it sends the ShardHeader section,
// which must be the first section after the header. A shard stream then
// carries PageBatch sections and End only (the caller's rule: precopy).
func (w *Writer) WriteShard(s Shard) error {
	if err := w.usable(); err != nil {
		return err
	}
	if w.stats.Sections != 0 {
		return fmt.Errorf("%w: ShardHeader after %d sections; it must come first", ErrMalformed, w.stats.Sections)
	}
	b := AppendShard(make([]byte, 0, ShardSize), s)
	if _, err := ParseShard(b); err != nil {
		return err
	}
	return w.writeFrame(ShardHeader, b)
}

// readShard reads an n-byte ShardHeader payload: the stream's first section.
func (r *Reader) readShard(n uint32, crc uint32) (Shard, uint32, error) {
	switch {
	case r.sections != 1:
		return Shard{}, 0, fmt.Errorf("%w: %s: a ShardHeader section comes first", ErrMalformed, r.at())
	case n != ShardSize:
		return Shard{}, 0, fmt.Errorf("%w: %s: %d payload bytes, want %d", ErrMalformed, r.at(), n, ShardSize)
	}
	b := r.scratch[:ShardSize]
	if err := r.readFull(b); err != nil {
		return Shard{}, 0, fmt.Errorf("stream: %s: reading payload: %w", r.at(), err)
	}
	crc = crc32.Update(crc, castagnoli, b)
	s, err := ParseShard(b)
	if err != nil {
		return Shard{}, 0, fmt.Errorf("%s: %w", r.at(), err)
	}
	return s, crc, nil
}

// SetClaim makes Next offer each PageBatch record's page index to claim
// (once its index is checked, before its data is stored) and refuse the
// section with ErrPageClaimed when claim returns false. The readers of one
// phase's streams share one claim so that a page arrives on one stream
// only (precopy). It may be called between calls to Next; nil stops it.
func (r *Reader) SetClaim(claim func(page uint32) bool) { r.claim = claim }

// SetStored makes the Reader call stored once for each PageBatch whose
// pages are all stored in mem and checked against their hashes (and, on
// the direct path, whose CRC is checked), with the batch's page indices
// in record order (a page sent twice in the batch is listed twice; zero
// pages are among them). A batch that fails is never reported, nor is any
// after it. Without SetWorkers stored is called from Next, before it
// returns the batch; with SetWorkers from the goroutine that stored the
// batch, possibly after Next returned it and at the latest before Wait
// (or End's Next) returns. Either way one Reader's calls come one at a
// time, in stream order, each after its batch's pages are in mem (what
// stored reads there is what the batch carried, unless a later batch
// rewrote the page). idx is valid during the call only. It applies to
// batches read after it is set; call it between calls to Next (nil: no
// reports, the default).
func (r *Reader) SetStored(stored func(idx []uint32)) { r.stored = stored }

// storedIndices appends recs' page indices to idx.
func storedIndices(idx []uint32, recs []batchRecord) []uint32 {
	for _, rc := range recs {
		idx = append(idx, rc.idx)
	}
	return idx
}
