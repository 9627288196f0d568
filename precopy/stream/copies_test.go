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
	copies := make([]byte, len(idx)*PageSize)
	hashes := make([]uint64, len(idx))
	for i, p := range idx {
		copy(copies[i*PageSize:], src[int(p)*PageSize:(int(p)+1)*PageSize])
		hashes[i] = hashOf(copies[i*PageSize : (i+1)*PageSize])
	}
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
