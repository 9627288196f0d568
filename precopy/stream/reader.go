package stream

import (
	"bufio"
	"fmt"
	"hash/crc32"
	"io"
	"slices"
)

// readBufferSize is the Reader's buffer, through which frame and record
// headers and blobs are read (pages go straight into place from a socket
// or a TLS connection: readInto): 64 KiB holds a default batch's record
// headers (256 × 16 bytes) many times over, while the page data that a
// fill brings along with the headers, and that is then copied out of the
// buffer, stays a small part of a 1 MiB batch.
const readBufferSize = 64 << 10

// Limits bound what a Reader accepts (docs/migration-stream.md §5). A zero
// field takes its default.
type Limits struct {
	// MaxPages is the destination partition's page count: a page index
	// at or above it is refused. Zero means len(mem)/PageSize of the
	// memory given to Next; a page must fit in that memory in any case.
	MaxPages uint32
	// MaxBatchPages bounds the pages of one PageBatch (default
	// DefaultMaxBatchPages).
	MaxBatchPages uint32
	// MaxBlob bounds a blob section's payload (default DefaultMaxBlob).
	MaxBlob uint32
}

func (l Limits) withDefaults() (Limits, error) {
	if l.MaxBatchPages == 0 {
		l.MaxBatchPages = DefaultMaxBatchPages
	}
	if l.MaxBlob == 0 {
		l.MaxBlob = DefaultMaxBlob
	}
	if l.MaxBatchPages > maxBatchPagesLimit {
		return l, fmt.Errorf("stream: MaxBatchPages %d: a batch holds at most %d", l.MaxBatchPages, maxBatchPagesLimit)
	}
	return l, nil
}

// maxBatchPayload is the largest PageBatch payload the limits allow.
func (l Limits) maxBatchPayload() uint64 {
	return BatchHeaderSize + uint64(l.MaxBatchPages)*(RecordHeaderSize+PageSize)
}

// Section is what Next read.
type Section struct {
	Type SectionType
	// Blob is the payload of a blob section, newly allocated.
	Blob []byte
	// Pages and ZeroPages count the page records of a PageBatch.
	Pages, ZeroPages int
	// Shard is a ShardHeader section's payload, checked (ParseShard).
	Shard Shard
}

// Reader reads a migration stream. Each call to Next reads one section;
// after End it returns io.EOF. The first error sticks: later calls return
// it again.
type Reader struct {
	br       *bufio.Reader
	lim      Limits
	off      int64 // stream bytes consumed
	sections int   // sections started, for error messages
	sawState bool
	cur      SectionType // section being read, for error messages
	curStart int64       // its offset
	stats    Stats
	err      error
	scratch  [RecordHeaderSize]byte // frame headers, CRCs, record headers, Shard payloads
	par      *parallel              // SetWorkers: the parallel PageBatch path
	claim    func(page uint32) bool // SetClaim
	stored   func(idx []uint32)     // SetStored
	storedIx []uint32               // the direct path's list for stored

	raw      io.Reader     // what br reads: pages are read from it directly (readInto)
	headBuf  []byte        // a PageBatch's record headers
	recs     []batchRecord // and the records they make
	pageBufs [][]byte      // a chunk of pages being read
}

// NewReader reads and checks the stream header from r. It reads through a
// 64 KiB buffer; if r is a *bufio.Reader at least that large, it is used
// as is.
func NewReader(r io.Reader, lim Limits) (*Reader, error) {
	lim, err := lim.withDefaults()
	if err != nil {
		return nil, err
	}
	rd := &Reader{br: bufio.NewReaderSize(r, readBufferSize), lim: lim, raw: r}
	var h [HeaderSize]byte
	if err := rd.readFull(h[:]); err != nil {
		return nil, fmt.Errorf("stream: reading stream header: %w", err)
	}
	if string(h[:len(Magic)]) != Magic {
		return nil, fmt.Errorf("%w: %q", ErrMagic, h[:len(Magic)])
	}
	switch v := le.Uint16(h[8:]); {
	case v >= 1 && v < Version:
		return nil, fmt.Errorf("%w: %d, written by an older gmig (this reader knows %d only: the PageBatch layout changed)", ErrVersion, v, Version)
	case v != Version:
		return nil, fmt.Errorf("%w: %d (this reader knows %d)", ErrVersion, v, Version)
	}
	if f, res := le.Uint16(h[10:]), le.Uint32(h[12:]); f != 0 || res != 0 {
		return nil, fmt.Errorf("%w: stream header flags %#x, reserved %#x", ErrReserved, f, res)
	}
	rd.stats.Bytes = HeaderSize
	return rd, nil
}

// Stats returns what the Reader has accepted so far (the section in which
// an error occurred is not counted).
func (r *Reader) Stats() Stats { return r.stats }

// Next reads the next section. A PageBatch is decoded into mem, the
// destination partition: its record headers are checked first (a page
// index at or above the limit is refused before any data is read), then
// each page's data is read into mem[index*PageSize:] and checked there
// against its hash. The section's CRC (over its headers) is checked after
// its last page, so on any error mem may hold pages of this and earlier
// batches, the failing one among them, and must be discarded. For blob sections mem is unused.
// After End, Next returns io.EOF; if bytes already buffered follow End it
// returns ErrTrailingData instead (CheckEOF checks the rest).
func (r *Reader) Next(mem []byte) (Section, error) {
	if r.err != nil {
		return Section{}, r.err
	}
	s, err := r.next(mem)
	if err != nil {
		if r.par != nil {
			r.par.drain() // nothing writes mem once Next has failed
		}
		r.err = err
		return Section{}, err
	}
	r.stats.Sections++
	r.stats.Pages += uint64(s.Pages)
	r.stats.ZeroPages += uint64(s.ZeroPages)
	return s, nil
}

// CheckEOF reads on after End and returns ErrTrailingData unless the
// underlying reader is at EOF. Use it where the stream should end at End
// (a file, a connection the source closes); do not use it on a connection
// the source keeps open, since it blocks until data or EOF. It returns an
// error if End has not been read.
func (r *Reader) CheckEOF() error {
	if r.err != io.EOF {
		return fmt.Errorf("stream: CheckEOF before End (%v)", r.err)
	}
	var b [1]byte
	n, err := io.ReadFull(r.br, b[:])
	if n > 0 {
		r.err = fmt.Errorf("%w at offset %d", ErrTrailingData, r.off)
		return r.err
	}
	if err != io.EOF {
		return fmt.Errorf("stream: reading after End: %w", err)
	}
	return nil
}

func (r *Reader) next(mem []byte) (Section, error) {
	if r.par != nil {
		if err := r.par.failed(); err != nil {
			return Section{}, err
		}
	}
	r.sections++
	start := r.off
	fh := r.scratch[:FrameHeaderSize]
	if err := r.readFull(fh); err != nil {
		return Section{}, fmt.Errorf("stream: reading section %d header at offset %d: %w", r.sections, start, err)
	}
	t, flags, res, n := SectionType(fh[0]), fh[1], le.Uint16(fh[2:]), le.Uint32(fh[4:])
	r.cur, r.curStart = t, start
	if !t.known() {
		return Section{}, fmt.Errorf("%w: %s: this reader cannot interpret it (corrupt stream or newer writer)", ErrSectionType, r.at())
	}
	if flags != 0 || res != 0 {
		return Section{}, fmt.Errorf("%w: %s: flags %#x, reserved %#x", ErrReserved, r.at(), flags, res)
	}
	crc := crc32.Update(0, castagnoli, fh)
	s := Section{Type: t}
	var err error
	switch {
	case t == PageBatch:
		if uint64(n) > r.lim.maxBatchPayload() {
			return Section{}, fmt.Errorf("%w: %s: %d bytes, limit %d (%d pages)", ErrTooLarge, r.at(), n, r.lim.maxBatchPayload(), r.lim.MaxBatchPages)
		}
		if r.par != nil {
			// Its CRC is read here and checked in the background.
			if s.Pages, s.ZeroPages, err = r.readBatchParallel(mem, fh, n); err != nil {
				return Section{}, err
			}
			r.stats.Bytes += uint64(FrameHeaderSize) + uint64(n) + FrameTrailerSize
			return s, nil
		}
		s.Pages, s.ZeroPages, crc, err = r.readBatch(mem, n, crc)
	case t == ShardHeader:
		s.Shard, crc, err = r.readShard(n, crc)
	case t == End:
		if n != 0 {
			return Section{}, fmt.Errorf("%w: %s: %d payload bytes, want 0", ErrMalformed, r.at(), n)
		}
		if r.par != nil {
			// The stream is whole only once every batch is.
			if err := r.par.drain(); err != nil {
				return Section{}, err
			}
		}
	default:
		if n > r.lim.MaxBlob {
			return Section{}, fmt.Errorf("%w: %s: %d bytes, limit %d", ErrTooLarge, r.at(), n, r.lim.MaxBlob)
		}
		if t == DeviceState && r.sawState {
			return Section{}, fmt.Errorf("%w: %s: a stream carries one DeviceState", ErrDuplicate, r.at())
		}
		s.Blob, crc, err = r.readBlob(n, crc)
	}
	if err != nil {
		return Section{}, err
	}
	c := r.scratch[:FrameTrailerSize]
	if err := r.readFull(c); err != nil {
		return Section{}, fmt.Errorf("stream: reading CRC of %s: %w", r.at(), err)
	}
	if got := le.Uint32(c); got != crc {
		return Section{}, fmt.Errorf("%w: %s: stream has %#08x, content gives %#08x", ErrChecksum, r.at(), got, crc)
	}
	r.stats.Bytes += uint64(FrameHeaderSize) + uint64(n) + FrameTrailerSize
	switch t {
	case PageBatch:
		if r.stored != nil { // its pages are checked and in place, its CRC too
			r.storedIx = storedIndices(r.storedIx[:0], r.recs)
			r.stored(r.storedIx)
		}
	case DeviceState:
		r.sawState = true
	case End:
		if k := r.br.Buffered(); k > 0 {
			return Section{}, fmt.Errorf("%w: %d bytes at offset %d", ErrTrailingData, k, r.off)
		}
		r.stats.Sections++
		return Section{}, io.EOF
	}
	return s, nil
}

// at says where the section being read is, for error messages.
func (r *Reader) at() string {
	return fmt.Sprintf("section %d (%v) at offset %d", r.sections, r.cur, r.curStart)
}

// readBlob reads an n-byte payload. The buffer grows as bytes arrive, so a
// truncated stream that announces a large blob costs no more memory than it
// sent (at most twice).
func (r *Reader) readBlob(n uint32, crc uint32) ([]byte, uint32, error) {
	const first = 64 << 10
	b := make([]byte, 0, min(int(n), first))
	for len(b) < int(n) {
		if len(b) == cap(b) {
			b = slices.Grow(b, min(int(n)-len(b), cap(b)))
		}
		chunk := b[len(b):min(cap(b), int(n))]
		if err := r.readFull(chunk); err != nil {
			return nil, 0, fmt.Errorf("stream: %s: reading payload byte %d of %d: %w", r.at(), len(b), n, err)
		}
		b = b[:len(b)+len(chunk)]
	}
	return b, crc32.Update(crc, castagnoli, b), nil
}

// readFull fills b from the stream; running out of stream is
// io.ErrUnexpectedEOF, since only End may finish a stream.
func (r *Reader) readFull(b []byte) error {
	k, err := io.ReadFull(r.br, b)
	r.off += int64(k)
	return eofIsUnexpected(err)
}

// eofIsUnexpected turns io.EOF into io.ErrUnexpectedEOF.
func eofIsUnexpected(err error) error {
	if err == io.EOF {
		return io.ErrUnexpectedEOF
	}
	return err
}
