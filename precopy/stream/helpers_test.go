package stream

import (
	"bytes"
	"errors"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// randMem returns a partition of pages pages; each page is all zeros with
// probability zeroFrac and random otherwise.
func randMem(rng *rand.Rand, pages int, zeroFrac float64) []byte {
	mem := make([]byte, pages*PageSize)
	for p := range pages {
		if rng.Float64() < zeroFrac {
			continue
		}
		page := mem[p*PageSize : (p+1)*PageSize]
		for i := 0; i < len(page); i += 8 {
			le.PutUint64(page[i:], rng.Uint64())
		}
	}
	return mem
}

func allPages(n int) []uint32 {
	idx := make([]uint32, n)
	for i := range idx {
		idx[i] = uint32(i)
	}
	return idx
}

// readAll reads sections until an error and returns them and the error
// (io.EOF after a good End).
func readAll(data []byte, lim Limits, mem []byte) ([]Section, error) {
	r, err := NewReader(bytes.NewReader(data), lim)
	if err != nil {
		return nil, err
	}
	var out []Section
	for {
		s, err := r.Next(mem)
		if err != nil {
			return out, err
		}
		out = append(out, s)
	}
}

// header builds a stream header.
func header(version, flags uint16, reserved uint32) []byte {
	h := make([]byte, HeaderSize)
	copy(h, Magic)
	le.PutUint16(h[8:], version)
	le.PutUint16(h[10:], flags)
	le.PutUint32(h[12:], reserved)
	return h
}

// frame builds a section with a correct CRC.
func frame(t SectionType, flags byte, payload []byte) []byte {
	b := make([]byte, FrameHeaderSize, FrameHeaderSize+len(payload)+FrameTrailerSize)
	b[0], b[1] = byte(t), flags
	le.PutUint32(b[4:], uint32(len(payload)))
	b = append(b, payload...)
	return le.AppendUint32(b, crcOf(b))
}

// crcOf is the CRC of a section whose frame header and payload are b: of
// all of it, or of a PageBatch's headers (as far as b has them).
func crcOf(b []byte) uint32 {
	if SectionType(b[0]) == PageBatch && len(b) >= FrameHeaderSize+BatchHeaderSize {
		heads := FrameHeaderSize + BatchHeaderSize + uint64(le.Uint32(b[FrameHeaderSize:]))*RecordHeaderSize
		b = b[:min(uint64(len(b)), heads)]
	}
	return crc32.Checksum(b, castagnoli)
}

// record builds a page record; data nil means a zero record.
func record(idx uint32, flags byte, hash uint64, data []byte) []byte {
	b := make([]byte, RecordHeaderSize, RecordHeaderSize+len(data))
	le.PutUint32(b, idx)
	b[4] = flags
	le.PutUint64(b[8:], hash)
	return append(b, data...)
}

// batch builds a PageBatch payload from records (each a header and its
// data, from record): the count, the records' headers, then their data.
func batch(count uint32, records ...[]byte) []byte {
	b := le.AppendUint32(nil, count)
	for _, r := range records {
		b = append(b, r[:min(len(r), RecordHeaderSize)]...)
	}
	for _, r := range records {
		if len(r) > RecordHeaderSize {
			b = append(b, r[RecordHeaderSize:]...)
		}
	}
	return b
}

func filledPage(v byte) []byte { return bytes.Repeat([]byte{v}, PageSize) }

func hashOf(b []byte) uint64 { return xxhash.Sum64(b) }

// reseal recomputes the CRC of every frame in a stream whose frame lengths
// still fit, so a test or the fuzzer can reach the checks behind the CRC.
func reseal(b []byte) []byte {
	b = bytes.Clone(b)
	for off := HeaderSize; off+FrameHeaderSize <= len(b); {
		n := int(le.Uint32(b[off+4:]))
		end := off + FrameHeaderSize + n
		if n < 0 || end+FrameTrailerSize > len(b) || end < off {
			break
		}
		le.PutUint32(b[end:], crcOf(b[off:end]))
		off = end + FrameTrailerSize
	}
	return b
}

// smallStream is a valid stream of every section type: a batch of two
// data pages and a zero page, every blob type, End.
func smallStream(t testing.TB) (data, mem []byte) {
	t.Helper()
	mem = make([]byte, 4*PageSize)
	copy(mem[1*PageSize:], filledPage(0x11))
	copy(mem[3*PageSize:], filledPage(0x33))
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.WritePages([]uint32{1, 2, 3}, mem, nil); err != nil {
		t.Fatal(err)
	}
	for _, s := range []struct {
		t SectionType
		b string
	}{{DeviceState, "state"}, {APILog, "log"}, {FrontEnd, "fe"}, {Meta, ""}} {
		if err := w.WriteBlob(s.t, []byte(s.b)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), mem
}

// failAfter is an io.Reader that serves data and then fails the test if
// read again: a Reader must not read past what it has been shown.
type failAfter struct {
	t    testing.TB
	data []byte
}

func (f *failAfter) Read(p []byte) (int, error) {
	if len(f.data) == 0 {
		f.t.Error("read beyond the prefix")
		return 0, errors.New("read beyond prefix")
	}
	n := copy(p, f.data)
	f.data = f.data[n:]
	return n, nil
}

var _ io.Reader = (*failAfter)(nil)
