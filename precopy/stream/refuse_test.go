package stream

import (
	"bytes"
	"errors"
	"io"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
)

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

var (
	good     = filledPage(0x42)
	goodHash = hashOf(good)
	end      = frame(End, 0, nil)
)

// TestRefusals checks that every malformed stream is refused with its
// sentinel error and a message that says where.
func TestRefusals(t *testing.T) {
	h := header(Version, 0, 0)
	oneGood := func(idx uint32) []byte { return frame(PageBatch, 0, batch(1, record(idx, 0, goodHash, good))) }
	badPage := bytes.Clone(good)
	badPage[100] ^= 1
	// A frame whose CRC is wrong.
	badCRC := frame(DeviceState, 0, []byte("state"))
	badCRC[len(badCRC)-1] ^= 0xff
	// A frame whose payload changed after the CRC was taken.
	badPayload := frame(APILog, 0, []byte("log"))
	badPayload[FrameHeaderSize] ^= 1
	sectionRes := frame(Meta, 0, nil)
	sectionRes[3] = 1
	sectionRes = reseal(cat(h, sectionRes))[HeaderSize:]

	tests := []struct {
		name    string
		data    []byte
		lim     Limits
		want    error
		mention string
	}{
		{"bad magic", cat([]byte("GMIGSTRX"), h[8:], end), Limits{}, ErrMagic, "GMIGSTRX"},
		{"not a stream", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), Limits{}, ErrMagic, ""},
		{"version 0", cat(header(0, 0, 0), end), Limits{}, ErrVersion, "0"},
		{"version 1", cat(header(1, 0, 0), end), Limits{}, ErrVersion, "1"},
		{"version 2", cat(header(2, 0, 0), end), Limits{}, ErrVersion, "2, written by an older gmig"},
		{"version 3", cat(header(Version3, 0, 0), frame(PageBatch, 0, batch(0)), end), Limits{}, ErrVersion, "3, written by an older gmig"},
		{"version 5", cat(header(5, 0, 0), end), Limits{}, ErrVersion, "5"},
		{"header flags", cat(header(Version, 1, 0), end), Limits{}, ErrReserved, "flags"},
		{"header reserved", cat(header(Version, 0, 1<<31), end), Limits{}, ErrReserved, "reserved"},
		{"section type 0", cat(h, frame(0, 0, nil), end), Limits{}, ErrSectionType, "SectionType(0x00)"},
		{"section type 8", cat(h, frame(8, 0, []byte("future")), end), Limits{}, ErrSectionType, "section 1"},
		{"section flags", cat(h, frame(Meta, 1, nil), end), Limits{}, ErrReserved, "Meta"},
		{"section reserved", cat(h, sectionRes, end), Limits{}, ErrReserved, "Meta"},
		{"bad CRC", cat(h, badCRC, end), Limits{}, ErrChecksum, "section 1 (DeviceState)"},
		{"payload changed", cat(h, frame(Meta, 0, nil), badPayload, end), Limits{}, ErrChecksum, "section 2 (APILog)"},
		{"page hash", cat(h, oneGood(0), frame(PageBatch, 0, batch(2, record(1, 0, goodHash, good), record(3, 0, goodHash, badPage))), end),
			Limits{}, ErrPageHash, "page 3 (record 1)"},
		{"zero page hash", cat(h, frame(PageBatch, 0, batch(1, record(2, RecordZero, 0, nil))), end), Limits{}, ErrPageHash, "zero page 2"},
		{"record flags", cat(h, frame(PageBatch, 0, batch(1, record(0, 0x02, goodHash, good))), end), Limits{}, ErrReserved, "record 0"},
		{"record reserved", cat(h, frame(PageBatch, 0, batch(1, func() []byte {
			r := record(0, 0, goodHash, good)
			r[6] = 1
			return r
		}())), end), Limits{}, ErrReserved, "record 0"},
		{"page beyond MaxPages", cat(h, oneGood(2), end), Limits{MaxPages: 2}, ErrPageIndex, "page 2"},
		{"page beyond memory", cat(h, oneGood(4), end), Limits{}, ErrPageIndex, "page 4"},
		{"page beyond memory, MaxPages larger", cat(h, oneGood(4), end), Limits{MaxPages: 100}, ErrPageIndex, "page 4"},
		{"huge page index", cat(h, oneGood(1<<32-1), end), Limits{}, ErrPageIndex, "page 4294967295"},
		{"duplicate DeviceState", cat(h, frame(DeviceState, 0, []byte("a")), frame(Meta, 0, nil), frame(DeviceState, 0, []byte("b")), end),
			Limits{}, ErrDuplicate, "section 3"},
		{"data after End", cat(h, end, []byte{0}), Limits{}, ErrTrailingData, "1 bytes"},
		{"stream after End", cat(h, end, h, end), Limits{}, ErrTrailingData, ""},
		{"End with payload", cat(h, frame(End, 0, []byte{0})), Limits{}, ErrMalformed, "End"},
		{"batch too many pages", cat(h, frame(PageBatch, 0, batch(3, record(0, 0, goodHash, good), record(1, 0, goodHash, good), record(2, 0, goodHash, good))), end),
			Limits{MaxBatchPages: 2}, ErrTooLarge, "limit 8228 (2 pages)"},
		{"batch count over limit", cat(h, frame(PageBatch, 0, batch(100)), end), Limits{MaxBatchPages: 2}, ErrTooLarge, "100 pages"},
		{"blob over limit", cat(h, frame(FrontEnd, 0, make([]byte, 11)), end), Limits{MaxBlob: 10}, ErrTooLarge, "FrontEnd"},
		{"batch without count", cat(h, frame(PageBatch, 0, []byte{1, 0}), end), Limits{}, ErrMalformed, "page count"},
		{"batch count above its records", cat(h, frame(PageBatch, 0, batch(2, record(0, RecordZero, zeroHash, nil))), end), Limits{}, ErrMalformed, "2 pages cannot take 16 bytes"},
		{"batch count above its data", cat(h, frame(PageBatch, 0, batch(2, record(0, 0, goodHash, good), record(1, 0, goodHash, nil))), end),
			Limits{}, ErrMalformed, "2 records of which 0 zero take 8228 bytes, payload has 4132"},
		{"batch bytes after records", cat(h, frame(PageBatch, 0, append(batch(1, record(0, 0, goodHash, good)), make([]byte, 16)...)), end),
			Limits{}, ErrMalformed, "cannot take"},
		{"batch of zero records with extra bytes", cat(h, frame(PageBatch, 0, append(batch(1, record(0, RecordZero, zeroHash, nil)), make([]byte, 8)...)), end),
			Limits{}, ErrMalformed, "take 20 bytes, payload has 28"},
		{"data record cut short by length", cat(h, frame(PageBatch, 0, batch(2, record(0, RecordZero, zeroHash, nil), record(1, 0, goodHash, good[:100]))), end),
			Limits{}, ErrMalformed, "take 4132 bytes, payload has 136"},
		{"no End", cat(h, oneGood(0)), Limits{}, io.ErrUnexpectedEOF, "section 2 header"},
		{"header only", h, Limits{}, io.ErrUnexpectedEOF, "section 1"},
		{"empty input", nil, Limits{}, io.ErrUnexpectedEOF, "stream header"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			mem := make([]byte, 4*PageSize)
			_, err := readAll(tc.data, tc.lim, mem)
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if !strings.HasPrefix(err.Error(), "stream: ") || !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("message %q: want prefix \"stream: \" and mention of %q", err, tc.mention)
			}
		})
	}
}

// The first error sticks.
func TestReaderErrorSticks(t *testing.T) {
	data := cat(header(Version, 0, 0), frame(8, 0, nil), frame(Meta, 0, []byte("x")), end)
	r, err := NewReader(bytes.NewReader(data), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	_, err1 := r.Next(nil)
	_, err2 := r.Next(nil)
	if !errors.Is(err1, ErrSectionType) || err2 != err1 {
		t.Errorf("first %v, then %v", err1, err2)
	}
}

// Trailing data that is not buffered yet is found by CheckEOF.
func TestCheckEOF(t *testing.T) {
	data := cat(header(Version, 0, 0), end, []byte("x"))
	r, err := NewReader(iotest.OneByteReader(bytes.NewReader(data)), Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.CheckEOF(); err == nil {
		t.Error("CheckEOF before End succeeded")
	}
	if _, err := r.Next(nil); err != io.EOF {
		t.Fatalf("Next: %v, want io.EOF", err)
	}
	if err := r.CheckEOF(); !errors.Is(err, ErrTrailingData) {
		t.Errorf("CheckEOF: %v, want ErrTrailingData", err)
	}
}

// Cutting a valid stream anywhere gives a clean io.ErrUnexpectedEOF.
func TestTruncatedEverywhere(t *testing.T) {
	data, src := smallStream(t)
	for cut := range len(data) {
		mem := make([]byte, len(src))
		_, err := readAll(data[:cut], Limits{}, mem)
		if !errors.Is(err, io.ErrUnexpectedEOF) {
			t.Fatalf("cut at %d of %d: %v, want io.ErrUnexpectedEOF", cut, len(data), err)
		}
		if !strings.HasPrefix(err.Error(), "stream: ") {
			t.Fatalf("cut at %d: message %q", cut, err)
		}
	}
	mem := make([]byte, len(src))
	secs, err := readAll(data, Limits{}, mem)
	if err != io.EOF || len(secs) != 5 || !bytes.Equal(mem, src) {
		t.Fatalf("whole stream: %d sections, %v", len(secs), err)
	}
}

// allocated returns the bytes f allocates.
func allocated(f func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A section announcing more than the limits is refused from its header:
// nothing past the header is read and nothing of its size is allocated.
func TestOversizedRefusedBeforeAllocating(t *testing.T) {
	hugeBlob := make([]byte, FrameHeaderSize)
	hugeBlob[0] = byte(APILog)
	le.PutUint32(hugeBlob[4:], 1<<32-1)
	hugeBatch := make([]byte, FrameHeaderSize)
	hugeBatch[0] = byte(PageBatch)
	le.PutUint32(hugeBatch[4:], 1<<32-1)
	// Within the byte limit, but the count is over the page limit.
	manyPages := make([]byte, FrameHeaderSize+BatchHeaderSize)
	manyPages[0] = byte(PageBatch)
	le.PutUint32(manyPages[4:], uint32(Limits{MaxBatchPages: 16}.maxBatchPayload()))
	le.PutUint32(manyPages[8:], 1<<31)
	for _, tc := range []struct {
		name  string
		frame []byte
	}{{"blob", hugeBlob}, {"batch bytes", hugeBatch}, {"batch pages", manyPages}} {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			n := allocated(func() {
				src := &failAfter{t: t, data: cat(header(Version, 0, 0), tc.frame)}
				var r *Reader
				r, err = NewReader(src, Limits{MaxBatchPages: 16, MaxBlob: 1 << 20})
				if err == nil {
					_, err = r.Next(make([]byte, 16*PageSize))
				}
			})
			if !errors.Is(err, ErrTooLarge) {
				t.Fatalf("got %v, want ErrTooLarge", err)
			}
			// The reader's buffer and the 64 KiB of mem; far below 4 GiB.
			if n > 1<<20 {
				t.Errorf("allocated %d bytes", n)
			}
		})
	}
}

// A blob within the limit but cut short costs memory for what arrived, not
// for what it announced.
func TestTruncatedBlobAllocatesWhatArrived(t *testing.T) {
	f := make([]byte, FrameHeaderSize, FrameHeaderSize+1000)
	f[0] = byte(DeviceState)
	le.PutUint32(f[4:], 60<<20)
	f = append(f, make([]byte, 1000)...)
	var err error
	n := allocated(func() {
		_, err = readAll(cat(header(Version, 0, 0), f), Limits{}, nil)
	})
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("got %v", err)
	}
	if n > 2<<20 {
		t.Errorf("allocated %d bytes for a 1000-byte fragment", n)
	}
}

func TestLimitsValidated(t *testing.T) {
	if _, err := NewReader(bytes.NewReader(header(Version, 0, 0)), Limits{MaxBatchPages: 1 << 31}); err == nil {
		t.Error("MaxBatchPages whose batch cannot be framed accepted")
	}
}

// A page whose data does not match its hash is refused naming it; it is
// read straight into mem, where the pages before it are too (the
// destination is discarded on error).
func TestCorruptPageRefused(t *testing.T) {
	bad := bytes.Clone(good)
	bad[PageSize-1] ^= 0x80
	data := cat(header(Version, 0, 0), frame(PageBatch, 0, batch(2, record(0, 0, goodHash, good), record(1, 0, goodHash, bad))), end)
	mem := bytes.Repeat([]byte{0xee}, 2*PageSize)
	_, err := readAll(data, Limits{}, mem)
	if !errors.Is(err, ErrPageHash) || !strings.Contains(err.Error(), "page 1 ") {
		t.Fatalf("got %v, want ErrPageHash naming page 1", err)
	}
	if !bytes.Equal(mem[:PageSize], good) {
		t.Error("verified page 0 was not written")
	}
}
