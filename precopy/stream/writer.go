package stream

import (
	"fmt"
	"hash/crc32"
	"io"
	"net"

	"github.com/cespare/xxhash/v2"
)

// Writer writes a migration stream. Create it with NewWriter, send pages
// and blobs in any order (at most one DeviceState), and finish with Close.
// After an error from the underlying writer every call returns that error:
// the stream is broken and the destination will discard it.
type Writer struct {
	w          io.Writer
	batchPages int
	buf        []byte                                   // one PageBatch frame, reused
	heads      []byte                                   // a frozen frame's headers and CRC, reused
	iov        net.Buffers                              // a frozen frame's pieces, reused
	flat       []byte                                   // a frozen frame copied whole for a writer without vectored writes
	frame      [FrameHeaderSize + FrameTrailerSize]byte // a blob's frame header and CRC
	stats      Stats
	sentState  bool
	closed     bool
	err        error
}

// NewWriter writes the stream header to w and returns a Writer that sends
// batches of at most DefaultBatchPages pages.
func NewWriter(w io.Writer) (*Writer, error) {
	return NewWriterSize(w, DefaultBatchPages)
}

// NewWriterSize is NewWriter with batches of at most batchPages pages, for a
// reader whose Limits.MaxBatchPages is below DefaultBatchPages or to tune
// throughput. batchPages must be in 1..DefaultMaxBatchPages.
func NewWriterSize(w io.Writer, batchPages int) (*Writer, error) {
	if batchPages < 1 || batchPages > DefaultMaxBatchPages {
		return nil, fmt.Errorf("stream: batch of %d pages: want 1..%d", batchPages, DefaultMaxBatchPages)
	}
	var h [HeaderSize]byte
	copy(h[:], Magic)
	le.PutUint16(h[8:], Version)
	// h[10:12] flags and h[12:16] reserved stay zero.
	if _, err := w.Write(h[:]); err != nil {
		return nil, fmt.Errorf("stream: writing header: %w", err)
	}
	return &Writer{w: w, batchPages: batchPages, stats: Stats{Bytes: HeaderSize}}, nil
}

// Stats returns what the Writer has sent so far.
func (w *Writer) Stats() Stats { return w.stats }

// WritePages sends pages idx of mem, the whole partition (page p is
// mem[p*PageSize:(p+1)*PageSize]), as PageBatch sections of at most the
// Writer's batch size. All-zero pages go as RecordZero records without
// data. If hashes is nil each page is copied once and hashed from the copy
// that is sent; otherwise hashes[i] must be the xxhash64 of page idx[i] as
// it is now, and mem must not change until WritePages returns (the VM is
// stopped): the pages are then written straight from mem, without a copy
// (a vectored write where the underlying writer is a connection that has
// one). It returns what this call sent; nothing is sent for an empty idx.
func (w *Writer) WritePages(idx []uint32, mem []byte, hashes []uint64) (Stats, error) {
	if hashes != nil && len(hashes) != len(idx) {
		return Stats{}, fmt.Errorf("stream: %d hashes for %d pages", len(hashes), len(idx))
	}
	return w.writePages(idx, mem, hashes, nil)
}

// WritePagesLive is WritePages for memory that may change while it runs
// (the VM is running): each page is copied once, and the copy is checked
// for zeros, hashed and sent, so every page verifies on the destination.
// sent[i] receives the hash of what was sent for idx[i], which is what the
// destination now holds: dirty tracking must compare later hashes against
// it, not against a hash taken before the send.
func (w *Writer) WritePagesLive(idx []uint32, mem []byte, sent []uint64) (Stats, error) {
	if len(sent) != len(idx) {
		return Stats{}, fmt.Errorf("stream: room for %d hashes for %d pages", len(sent), len(idx))
	}
	return w.writePages(idx, mem, nil, sent)
}

// WriteCopies sends pages the caller has already copied out of memory:
// pages holds len(idx) pages back to back, pages[i*PageSize:(i+1)*PageSize]
// being page idx[i]. hashes[i] must be the xxhash64 of that copy (as
// dirty.Tracker.RecordCopy returns them, or the GPU's hash of the page it
// was read from), or hashes is nil to hash the copies here. Live pre-copy
// uses it so that the hash its dirty tracker records is, by construction,
// the hash of the bytes sent. The copies must not change until
// WriteCopies returns: they are written where they lie, without a copy
// (writeBuffers), as frozen pages are. Page indices are not checked
// against a partition (the reader checks them).
func (w *Writer) WriteCopies(idx []uint32, pages []byte, hashes []uint64) (Stats, error) {
	if hashes != nil && len(hashes) != len(idx) {
		return Stats{}, fmt.Errorf("stream: %d hashes for %d pages", len(hashes), len(idx))
	}
	if len(pages) < len(idx)*PageSize {
		return Stats{}, fmt.Errorf("stream: %d bytes of copies for %d pages", len(pages), len(idx))
	}
	if err := w.usable(); err != nil {
		return Stats{}, err
	}
	return w.writeVectored(idx, pages, true, hashes)
}

func (w *Writer) writePages(idx []uint32, mem []byte, in, out []uint64) (Stats, error) {
	if err := w.usable(); err != nil {
		return Stats{}, err
	}
	npages := uint64(len(mem) / PageSize)
	for i, p := range idx {
		if uint64(p) >= npages {
			return Stats{}, fmt.Errorf("%w: page %d (idx[%d]) of a %d-page partition", ErrPageIndex, p, i, npages)
		}
	}
	if in != nil {
		return w.writeVectored(idx, mem, false, in)
	}
	var st Stats
	for start := 0; start < len(idx); start += w.batchPages {
		end := min(start+w.batchPages, len(idx))
		var bout []uint64
		if out != nil {
			bout = out[start:end]
		}
		bs, err := w.writeBatch(idx[start:end], mem, bout)
		st.add(bs)
		if err != nil {
			return st, err
		}
	}
	return st, nil
}

// writeVectored writes pages that do not change while it runs, batch by
// batch, without copying them to a socket (writeBuffers): each frame is
// its headers and CRC (prepareBatch) with the pages where they lie in mem
// between them. packed and hashes are prepareBatch's.
func (w *Writer) writeVectored(idx []uint32, mem []byte, packed bool, hashes []uint64) (Stats, error) {
	var st Stats
	for start := 0; start < len(idx); start += w.batchPages {
		end := min(start+w.batchPages, len(idx))
		var bh []uint64
		if hashes != nil {
			bh = hashes[start:end]
		}
		m := mem
		if packed {
			m = mem[start*PageSize : end*PageSize]
		}
		iov, bs := w.prepareBatch(idx[start:end], m, packed, bh)
		if err := w.writeBuffers(iov); err != nil {
			w.err = fmt.Errorf("stream: write failed, stream broken: %w", err)
			return st, fmt.Errorf("stream: writing PageBatch of %d pages: %w", bs.Pages, err)
		}
		w.stats.add(bs)
		st.add(bs)
	}
	return st, nil
}

// writeBuffers writes iov, one frame's pieces: with one vectored write
// where the underlying writer is a socket that has one (net.Buffers), else
// with a Write per run of small pieces, copied into one buffer, and one
// per large piece, written where it lies — a TLS connection would
// otherwise make a record and a system call of every page and every
// record header, while a piece of directPiece bytes or more (a run of
// pages adjacent in memory: a GPU read's chunk) fills whole records
// itself, so copying it first would only cost a pass over it.
func (w *Writer) writeBuffers(iov net.Buffers) error {
	switch w.w.(type) {
	case *net.TCPConn, *net.UnixConn:
		_, err := iov.WriteTo(w.w)
		return err
	}
	flat := w.flat[:0]
	for _, part := range iov {
		if len(part) < directPiece {
			flat = append(flat, part...)
			continue
		}
		if len(flat) > 0 {
			if _, err := w.w.Write(flat); err != nil {
				return err
			}
			flat = flat[:0]
		}
		if _, err := w.w.Write(part); err != nil {
			return err
		}
	}
	w.flat = flat
	if len(flat) == 0 {
		return nil
	}
	_, err := w.w.Write(flat)
	return err
}

// directPiece is the size from which writeBuffers writes a piece where it
// lies rather than copying it: four TLS records' worth.
const directPiece = 64 << 10

// writeBatch builds one PageBatch frame in w.buf and writes it with one
// Write: the record headers first, then the data of the non-zero pages
// (§4), each page copied once, then checked for zeros and hashed, so that
// what is sent verifies even if memory changes meanwhile (the VM runs):
// out[i], if out is set, receives the hash of what was sent of idx[i].
// Page idx[i] is at mem[idx[i]*PageSize:]; the caller has checked the
// indices against mem.
func (w *Writer) writeBatch(idx []uint32, mem []byte, out []uint64) (Stats, error) {
	if w.buf == nil {
		w.buf = make([]byte, 0, FrameHeaderSize+BatchHeaderSize+w.batchPages*(RecordHeaderSize+PageSize)+FrameTrailerSize)
	}
	heads := FrameHeaderSize + BatchHeaderSize + len(idx)*RecordHeaderSize
	b := w.buf[:heads]
	var zeros uint64
	for i, p := range idx {
		off := int(p) * PageSize
		page := mem[off : off+PageSize]
		rec := b[FrameHeaderSize+BatchHeaderSize+i*RecordHeaderSize:][:RecordHeaderSize]
		le.PutUint32(rec, p)
		rec[4], rec[5], rec[6], rec[7] = 0, 0, 0, 0
		var h uint64
		if isZero(page) {
			// Zero when looked at: a consistent thing to send even if
			// the page changes now.
			rec[4] = RecordZero
			h = zeroHash
			zeros++
		} else {
			b = append(b, page...)
			h = xxhash.Sum64(b[len(b)-PageSize:])
		}
		le.PutUint64(rec[8:], h)
		if out != nil {
			out[i] = h
		}
	}
	putBatchHeader(b, len(b)-FrameHeaderSize, len(idx))
	b = le.AppendUint32(b, crc32.Checksum(b[:heads], castagnoli))
	st := Stats{Sections: 1, Pages: uint64(len(idx)), ZeroPages: zeros, Bytes: uint64(len(b))}
	if err := w.write(b); err != nil {
		return Stats{}, fmt.Errorf("stream: writing PageBatch of %d pages: %w", len(idx), err)
	}
	w.stats.add(st)
	return st, nil
}

// putBatchHeader fills in a PageBatch's frame header and page count at
// b[0:FrameHeaderSize+BatchHeaderSize].
func putBatchHeader(b []byte, payload, count int) {
	b[0], b[1], b[2], b[3] = byte(PageBatch), 0, 0, 0
	le.PutUint32(b[4:], uint32(payload))
	le.PutUint32(b[FrameHeaderSize:], uint32(count))
}

// prepareBatch builds one PageBatch frame of pages that do not change
// while it is written, without copying them: its headers (frame header,
// page count, record headers) and CRC, with the pages where they lie in
// mem between them — runs of pages adjacent in mem as one piece — as
// pieces for one vectored write, in buffers of the Writer's that the next
// frame reuses. Page idx[i] is at mem[idx[i]*PageSize:], or at
// mem[i*PageSize:] when packed (copies). hashes[i] is page i's xxhash64,
// or hashes is nil to hash the pages here; a page is a zero page when its
// hash is the zero page's and its bytes are all zero. The bytes are those
// writeBatch would send.
func (w *Writer) prepareBatch(idx []uint32, mem []byte, packed bool, hashes []uint64) (net.Buffers, Stats) {
	heads := FrameHeaderSize + BatchHeaderSize + len(idx)*RecordHeaderSize
	if cap(w.heads) < heads+FrameTrailerSize {
		w.heads = make([]byte, 0, FrameHeaderSize+BatchHeaderSize+w.batchPages*RecordHeaderSize+FrameTrailerSize)
	}
	b := w.heads[:heads]
	iov := append(w.iov[:0], nil)
	var zeros uint64
	data := 0
	runStart, runEnd := -1, -1 // the last piece's extent in mem
	for i, p := range idx {
		off := int(p) * PageSize
		if packed {
			off = i * PageSize
		}
		page := mem[off : off+PageSize]
		var h uint64
		if hashes != nil {
			h = hashes[i]
		} else {
			h = xxhash.Sum64(page)
		}
		rec := b[FrameHeaderSize+BatchHeaderSize+i*RecordHeaderSize:][:RecordHeaderSize]
		le.PutUint32(rec, p)
		rec[4], rec[5], rec[6], rec[7] = 0, 0, 0, 0
		le.PutUint64(rec[8:], h)
		if h == zeroHash && isZero(page) {
			rec[4] = RecordZero
			zeros++
			continue
		}
		data += PageSize
		if off == runEnd {
			runEnd += PageSize
			iov[len(iov)-1] = mem[runStart:runEnd]
			continue
		}
		runStart, runEnd = off, off+PageSize
		iov = append(iov, page)
	}
	payload := heads - FrameHeaderSize + data
	putBatchHeader(b, payload, len(idx))
	iov[0] = b
	crc := le.AppendUint32(b[len(b):], crc32.Checksum(b, castagnoli)) // within capacity: b stays valid
	iov = append(iov, crc)
	w.iov = iov
	return iov, Stats{Sections: 1, Pages: uint64(len(idx)), ZeroPages: zeros, Bytes: uint64(FrameHeaderSize + payload + FrameTrailerSize)}
}

// WriteBlob sends b as one section of blob type t (DeviceState, APILog,
// FrontEnd or Meta). b must be at most DefaultMaxBlob bytes; a second
// DeviceState is refused with ErrDuplicate.
func (w *Writer) WriteBlob(t SectionType, b []byte) error {
	if err := w.usable(); err != nil {
		return err
	}
	if !t.IsBlob() {
		return fmt.Errorf("%w: %v is not a blob section", ErrSectionType, t)
	}
	if len(b) > DefaultMaxBlob {
		return fmt.Errorf("%w: %v of %d bytes, limit %d", ErrTooLarge, t, len(b), DefaultMaxBlob)
	}
	if t == DeviceState && w.sentState {
		return fmt.Errorf("%w: second DeviceState", ErrDuplicate)
	}
	if err := w.writeFrame(t, b); err != nil {
		return err
	}
	if t == DeviceState {
		w.sentState = true
	}
	return nil
}

// Close sends the End section. It does not close the underlying writer.
// Calls after the first return nil and send nothing.
func (w *Writer) Close() error {
	if w.closed {
		return nil
	}
	if w.err != nil {
		return w.err
	}
	if err := w.writeFrame(End, nil); err != nil {
		return err
	}
	w.closed = true
	return nil
}

// writeFrame sends one section: frame header, payload, CRC.
func (w *Writer) writeFrame(t SectionType, payload []byte) error {
	h, c := w.frame[:FrameHeaderSize], w.frame[FrameHeaderSize:]
	clear(h)
	h[0] = byte(t)
	le.PutUint32(h[4:], uint32(len(payload)))
	le.PutUint32(c, crc32.Update(crc32.Update(0, castagnoli, h), castagnoli, payload))
	for _, part := range [][]byte{h, payload, c} {
		if len(part) == 0 {
			continue
		}
		if err := w.write(part); err != nil {
			return fmt.Errorf("stream: writing %v section: %w", t, err)
		}
	}
	w.stats.add(Stats{Sections: 1, Bytes: uint64(FrameHeaderSize + len(payload) + FrameTrailerSize)})
	return nil
}

// write writes b whole; a failure sticks.
func (w *Writer) write(b []byte) error {
	if _, err := w.w.Write(b); err != nil {
		w.err = fmt.Errorf("stream: write failed, stream broken: %w", err)
		return err
	}
	return nil
}

func (w *Writer) usable() error {
	if w.err != nil {
		return w.err
	}
	if w.closed {
		return ErrClosed
	}
	return nil
}
