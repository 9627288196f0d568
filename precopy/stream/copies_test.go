package stream

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"testing"
)

// TestWriteCopies sends packed copies of scattered pages, with the caller's
// hashes and without, over several batches, and checks each lands at its
// own index on the destination.
func TestWriteCopies(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const pages = 700
	src := randMem(rng, pages, 0.3)
	var idx []uint32
	for p := pages - 1; p >= 0; p -= 1 + rng.IntN(3) {
		idx = append(idx, uint32(p))
	}
	copies, hashes := packCopies(src, idx)
	for _, hs := range [][]uint64{hashes, nil} {
		var buf bytes.Buffer
		w, err := NewWriterSize(&buf, 100)
		if err != nil {
			t.Fatal(err)
		}
		st, err := w.WriteCopies(idx, copies, hs)
		if err != nil {
			t.Fatal(err)
		}
		if st.Pages != uint64(len(idx)) || st.Sections != uint64((len(idx)+99)/100) {
			t.Fatalf("stats %+v for %d pages", st, len(idx))
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		dst := make([]byte, len(src))
		if _, err := readAll(buf.Bytes(), Limits{}, dst); err != io.EOF {
			t.Fatalf("reading: %v", err)
		}
		sent := map[uint32]bool{}
		for _, p := range idx {
			sent[p] = true
		}
		for p := range uint32(pages) {
			got, want := dst[p*PageSize:(p+1)*PageSize], src[p*PageSize:(p+1)*PageSize]
			if !sent[p] {
				want = zeroPage[:]
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("page %d differs (hashes given: %v)", p, hs != nil)
			}
		}
	}
}

func TestWriteCopiesRefuses(t *testing.T) {
	var buf bytes.Buffer
	w, _ := NewWriter(&buf)
	copies := make([]byte, 2*PageSize)
	if _, err := w.WriteCopies([]uint32{1, 2}, copies, []uint64{1}); err == nil {
		t.Error("short hash slice accepted")
	}
	if _, err := w.WriteCopies([]uint32{1, 2, 3}, copies, nil); err == nil {
		t.Error("short copy buffer accepted")
	}
	// A wrong hash is sent as given and refused by the reader.
	copies[0] = 1
	if _, err := w.WriteCopies([]uint32{0}, copies[:PageSize], []uint64{zeroHash}); err != nil {
		t.Fatal(err)
	}
	w.Close()
	if _, err := readAll(buf.Bytes(), Limits{}, make([]byte, PageSize)); !errors.Is(err, ErrPageHash) {
		t.Fatalf("wrong hash: %v, want ErrPageHash", err)
	}
	if _, err := w.WriteCopies([]uint32{0}, copies[:PageSize], nil); !errors.Is(err, ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestWriteCopiesSameBytes checks that copies written where they lie
// (WriteCopies, hashed here or given their hashes) make the very bytes
// that the copying writer (WritePages from memory, hashes nil) makes for
// the same pages, zero pages included.
func TestWriteCopiesSameBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	const pages = 300
	src := randMem(rng, pages, 0.4)
	var idx []uint32
	for p := 0; p < pages; p += 1 + rng.IntN(2) {
		idx = append(idx, uint32(p))
	}
	copies, hashes := packCopies(src, idx)
	write := func(fn func(w *Writer) error) []byte {
		var buf bytes.Buffer
		w, err := NewWriterSize(&buf, 64)
		if err != nil {
			t.Fatal(err)
		}
		if err := fn(w); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	want := write(func(w *Writer) error { _, err := w.WritePages(idx, src, nil); return err })
	for _, hs := range [][]uint64{nil, hashes} {
		got := write(func(w *Writer) error { _, err := w.WriteCopies(idx, copies, hs); return err })
		if !bytes.Equal(got, want) {
			t.Fatalf("WriteCopies (hashes given: %v) wrote %d bytes unlike WritePages' %d", hs != nil, len(got), len(want))
		}
	}
}

// TestPrepareBatchMergesRuns checks that pages adjacent in memory go as one
// piece of the vectored write, and that a zero page splits a run.
func TestPrepareBatchMergesRuns(t *testing.T) {
	mem := make([]byte, 6*PageSize)
	for p := range 6 {
		if p != 3 {
			mem[p*PageSize] = byte(p + 1)
		}
	}
	w, err := NewWriter(io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	// Packed copies 0..5 (page 3 zero): runs [0,3) and [4,6).
	iov, st := w.prepareBatch([]uint32{10, 11, 12, 13, 14, 15}, mem, true, nil)
	if len(iov) != 4 || len(iov[1]) != 3*PageSize || len(iov[2]) != 2*PageSize || st.ZeroPages != 1 {
		t.Fatalf("packed: %d pieces (%d, %d bytes), %d zero pages; want headers, 3 pages, 2 pages, CRC and 1",
			len(iov), len(iov[1]), len(iov[2]), st.ZeroPages)
	}
	// Frozen pages 0, 1, 4, 2 of mem: 0-1 adjacent, 4 and 2 each alone.
	hs := []uint64{hashOf(mem[:PageSize]), hashOf(mem[PageSize : 2*PageSize]), hashOf(mem[4*PageSize : 5*PageSize]), hashOf(mem[2*PageSize : 3*PageSize])}
	iov, _ = w.prepareBatch([]uint32{0, 1, 4, 2}, mem, false, hs)
	if len(iov) != 5 || len(iov[1]) != 2*PageSize {
		t.Fatalf("frozen: %d pieces, the first %d bytes; want 5, 2 pages", len(iov), len(iov[1]))
	}
}

// packCopies copies pages idx of src back to back, as WriteCopies takes
// them, with the hash of each copy.
func packCopies(src []byte, idx []uint32) ([]byte, []uint64) {
	copies := make([]byte, len(idx)*PageSize)
	hashes := make([]uint64, len(idx))
	for i, p := range idx {
		copy(copies[i*PageSize:], src[int(p)*PageSize:(int(p)+1)*PageSize])
		hashes[i] = hashOf(copies[i*PageSize : (i+1)*PageSize])
	}
	return copies, hashes
}
