package stream

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const pages = 1000
	src := randMem(rng, pages, 0.3)
	// A subset in random order, split across batches.
	idx := rng.Perm(pages)[:700]
	sent := make([]uint32, len(idx))
	for i, p := range idx {
		sent[i] = uint32(p)
	}
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := w.WritePages(sent, src, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ws.Pages != 700 || ws.Sections != 3 || ws.ZeroPages == 0 || ws.ZeroPages == 700 {
		t.Errorf("WritePages stats %+v, want 700 pages in 3 batches, some zero", ws)
	}
	blobs := map[SectionType][]byte{DeviceState: []byte(`{"Version":1}`), APILog: bytes.Repeat([]byte{7}, 100_000), FrontEnd: {1, 2, 3}, Meta: {}}
	for _, ty := range []SectionType{DeviceState, APILog, FrontEnd, Meta} {
		if err := w.WriteBlob(ty, blobs[ty]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if got := w.Stats(); got.Bytes != uint64(buf.Len()) || got.Sections != 3+4+1 || got.Pages != 700 || got.ZeroPages != ws.ZeroPages {
		t.Errorf("writer stats %+v, stream is %d bytes", got, buf.Len())
	}

	dst := bytes.Repeat([]byte{0xee}, pages*PageSize)
	r, err := NewReader(bytes.NewReader(buf.Bytes()), Limits{MaxPages: pages})
	if err != nil {
		t.Fatal(err)
	}
	var gotPages, gotZeros int
	gotBlobs := map[SectionType][]byte{}
	for {
		s, err := r.Next(dst)
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch s.Type {
		case PageBatch:
			gotPages += s.Pages
			gotZeros += s.ZeroPages
		default:
			gotBlobs[s.Type] = s.Blob
		}
	}
	if gotPages != 700 || uint64(gotZeros) != ws.ZeroPages {
		t.Errorf("read %d pages (%d zero), want 700 (%d)", gotPages, gotZeros, ws.ZeroPages)
	}
	for ty, b := range blobs {
		if !bytes.Equal(gotBlobs[ty], b) {
			t.Errorf("%v: got %d bytes, want %d", ty, len(gotBlobs[ty]), len(b))
		}
	}
	isSent := make([]bool, pages)
	for _, p := range sent {
		isSent[p] = true
	}
	for p := range pages {
		d, s := dst[p*PageSize:(p+1)*PageSize], src[p*PageSize:(p+1)*PageSize]
		if isSent[p] && !bytes.Equal(d, s) {
			t.Fatalf("page %d differs after round trip", p)
		}
		if !isSent[p] && !bytes.Equal(d, bytes.Repeat([]byte{0xee}, PageSize)) {
			t.Fatalf("page %d was not sent but changed", p)
		}
	}
	if rs, wst := r.Stats(), w.Stats(); rs != wst {
		t.Errorf("reader stats %+v, writer stats %+v", rs, wst)
	}
	if err := r.CheckEOF(); err != nil {
		t.Errorf("CheckEOF: %v", err)
	}
	if _, err := r.Next(dst); err != io.EOF {
		t.Errorf("Next after End: %v, want io.EOF", err)
	}
}

func TestRoundTripTrustedHashes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	src := randMem(rng, 64, 0.5)
	copy(src[5*PageSize:], filledPage(5))
	idx := allPages(64)
	hashes := make([]uint64, 64)
	for i := range hashes {
		hashes[i] = hashOf(src[i*PageSize : (i+1)*PageSize])
	}
	var buf bytes.Buffer
	w, _ := NewWriter(&buf)
	if _, err := w.WritePages(idx, src, hashes); err != nil {
		t.Fatal(err)
	}
	w.Close()
	dst := make([]byte, len(src))
	if _, err := readAll(buf.Bytes(), Limits{}, dst); err != io.EOF {
		t.Fatal(err)
	}
	if !bytes.Equal(dst, src) {
		t.Error("destination differs")
	}

	// A stale trusted hash is sent as given and refused on the destination.
	hashes[5]++
	buf.Reset()
	w, _ = NewWriter(&buf)
	w.WritePages(idx, src, hashes)
	w.Close()
	if _, err := readAll(buf.Bytes(), Limits{}, dst); !errors.Is(err, ErrPageHash) {
		t.Errorf("stale hash: %v, want ErrPageHash", err)
	}
}

func TestWritePagesLiveReportsSentHashes(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	src := randMem(rng, 40, 0.5)
	idx := allPages(40)
	sent := make([]uint64, 40)
	var buf bytes.Buffer
	w, _ := NewWriter(&buf)
	if _, err := w.WritePagesLive(idx, src, sent); err != nil {
		t.Fatal(err)
	}
	for i := range sent {
		if want := hashOf(src[i*PageSize : (i+1)*PageSize]); sent[i] != want {
			t.Fatalf("sent[%d] = %#x, want %#x", i, sent[i], want)
		}
	}
	if _, err := w.WritePagesLive(idx, src, sent[:3]); err == nil {
		t.Error("short sent slice accepted")
	}
}

func TestAllZeroPartition(t *testing.T) {
	const pages = 600
	src := make([]byte, pages*PageSize)
	var buf bytes.Buffer
	w, _ := NewWriter(&buf)
	st, err := w.WritePages(allPages(pages), src, nil)
	if err != nil {
		t.Fatal(err)
	}
	w.Close()
	if st.ZeroPages != pages || st.Pages != pages {
		t.Errorf("stats %+v, want %d zero pages", st, pages)
	}
	// 16 bytes a page plus framing: no page data on the wire.
	if max := uint64(pages*RecordHeaderSize + 3*(FrameHeaderSize+BatchHeaderSize+FrameTrailerSize)); st.Bytes > max {
		t.Errorf("%d bytes on the wire, want at most %d", st.Bytes, max)
	}
	dst := bytes.Repeat([]byte{0x5a}, pages*PageSize)
	if _, err := readAll(buf.Bytes(), Limits{}, dst); err != io.EOF {
		t.Fatal(err)
	}
	if !isZero(dst[:PageSize]) || !bytes.Equal(dst, src) {
		t.Error("zero pages did not clear the destination")
	}
}

func TestEmptyStream(t *testing.T) {
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := w.WritePages(nil, nil, nil); err != nil || st != (Stats{}) {
		t.Fatalf("empty WritePages: %+v, %v", st, err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if buf.Len() != HeaderSize+FrameHeaderSize+FrameTrailerSize {
		t.Errorf("empty stream is %d bytes", buf.Len())
	}
	secs, err := readAll(buf.Bytes(), Limits{}, nil)
	if err != io.EOF || len(secs) != 0 {
		t.Errorf("read %d sections, %v; want none, io.EOF", len(secs), err)
	}
}

func TestBatchSplitting(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	src := randMem(rng, 10, 0)
	var buf bytes.Buffer
	w, err := NewWriterSize(&buf, 3)
	if err != nil {
		t.Fatal(err)
	}
	st, err := w.WritePages(allPages(10), src, nil)
	if err != nil || st.Sections != 4 {
		t.Fatalf("%+v, %v; want 4 batches", st, err)
	}
	w.Close()
	dst := make([]byte, len(src))
	secs, err := readAll(buf.Bytes(), Limits{MaxBatchPages: 3}, dst)
	if err != io.EOF || len(secs) != 4 || secs[3].Pages != 1 {
		t.Fatalf("%+v, %v", secs, err)
	}
	if !bytes.Equal(dst, src) {
		t.Error("destination differs")
	}
	for _, n := range []int{0, -1, DefaultMaxBatchPages + 1} {
		if _, err := NewWriterSize(io.Discard, n); err == nil {
			t.Errorf("NewWriterSize(%d) accepted", n)
		}
	}
}

// A page sent again (dirty at stop-and-copy) overwrites the earlier copy,
// also when it became zero.
func TestResentPageWins(t *testing.T) {
	mem := make([]byte, 2*PageSize)
	copy(mem, filledPage(1))
	var buf bytes.Buffer
	w, _ := NewWriter(&buf)
	w.WritePages([]uint32{0, 1}, mem, nil)
	copy(mem[PageSize:], filledPage(2))
	clear(mem[:PageSize])
	w.WritePages([]uint32{0, 1}, mem, nil)
	w.Close()
	dst := make([]byte, len(mem))
	if _, err := readAll(buf.Bytes(), Limits{}, dst); err != io.EOF {
		t.Fatal(err)
	}
	if !bytes.Equal(dst, mem) {
		t.Error("destination holds the first copy")
	}
}

func TestWriterRefuses(t *testing.T) {
	mem := make([]byte, 4*PageSize)
	w, _ := NewWriter(io.Discard)
	if _, err := w.WritePages([]uint32{0, 4}, mem, nil); !errors.Is(err, ErrPageIndex) {
		t.Errorf("page beyond mem: %v", err)
	}
	if _, err := w.WritePages([]uint32{0, 1}, mem, []uint64{1}); err == nil {
		t.Error("hash count mismatch accepted")
	}
	if err := w.WriteBlob(PageBatch, nil); !errors.Is(err, ErrSectionType) {
		t.Errorf("WriteBlob(PageBatch): %v", err)
	}
	if err := w.WriteBlob(End, nil); !errors.Is(err, ErrSectionType) {
		t.Errorf("WriteBlob(End): %v", err)
	}
	if err := w.WriteBlob(Meta, make([]byte, DefaultMaxBlob+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("oversized blob: %v", err)
	}
	if err := w.WriteBlob(DeviceState, []byte("a")); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteBlob(DeviceState, []byte("b")); !errors.Is(err, ErrDuplicate) {
		t.Errorf("second DeviceState: %v", err)
	}
	if w.Stats().Sections != 1 {
		t.Errorf("refused writes were counted: %+v", w.Stats())
	}
	w.Close()
	if err := w.WriteBlob(Meta, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("WriteBlob after Close: %v", err)
	}
	if _, err := w.WritePages([]uint32{0}, mem, nil); !errors.Is(err, ErrClosed) {
		t.Errorf("WritePages after Close: %v", err)
	}
}

type errWriter struct{ n int }

func (e *errWriter) Write(p []byte) (int, error) {
	if e.n == 0 {
		return 0, errors.New("link down")
	}
	e.n--
	return len(p), nil
}

func TestWriterErrorSticks(t *testing.T) {
	if _, err := NewWriter(&errWriter{}); err == nil {
		t.Fatal("header write failure not reported")
	}
	w, err := NewWriter(&errWriter{n: 1})
	if err != nil {
		t.Fatal(err)
	}
	mem := filledPage(9)
	if _, err := w.WritePages([]uint32{0}, mem, nil); err == nil {
		t.Fatal("write failure not reported")
	}
	if err := w.WriteBlob(Meta, nil); err == nil {
		t.Error("writer went on after a failed write")
	}
	if err := w.Close(); err == nil {
		t.Error("Close after a failed write succeeded")
	}
}
