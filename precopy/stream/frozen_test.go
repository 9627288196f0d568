package stream

import (
	"bytes"
	"io"
	"math/rand/v2"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestWritePagesFrozen checks that pages with known hashes (written
// straight from memory in a vectored write) make the same bytes as pages
// copied and hashed by the writer, zero pages and odd batch sizes
// included, and that a reader takes them.
func TestWritePagesFrozen(t *testing.T) {
	const pages = 300
	mem := make([]byte, pages*PageSize)
	r := rand.New(rand.NewPCG(1, 2))
	for p := range pages {
		if p%3 == 0 {
			continue // zero
		}
		for i := p * PageSize; i < (p+1)*PageSize; i += 8 {
			le.PutUint64(mem[i:], r.Uint64())
		}
	}
	idx := make([]uint32, 0, pages)
	for p := range pages {
		if p%5 != 4 {
			idx = append(idx, uint32(p))
		}
	}
	hashes := make([]uint64, len(idx))
	for i, p := range idx {
		hashes[i] = xxhash.Sum64(mem[int(p)*PageSize : (int(p)+1)*PageSize])
	}
	for _, batch := range []int{1, 7, 256} {
		var copied, frozen bytes.Buffer
		wc, _ := NewWriterSize(&copied, batch)
		wf, _ := NewWriterSize(&frozen, batch)
		sc, err := wc.WritePages(idx, mem, nil)
		if err != nil {
			t.Fatal(err)
		}
		sf, err := wf.WritePages(idx, mem, hashes)
		if err != nil {
			t.Fatal(err)
		}
		if sc != sf || !bytes.Equal(copied.Bytes(), frozen.Bytes()) {
			t.Fatalf("batch %d: frozen pages write %d bytes %+v, copied %d %+v", batch, frozen.Len(), sf, copied.Len(), sc)
		}
		if err := wf.Close(); err != nil {
			t.Fatal(err)
		}
		dst := make([]byte, len(mem))
		rd, err := NewReader(&frozen, Limits{})
		if err != nil {
			t.Fatal(err)
		}
		for {
			if _, err := rd.Next(dst); err == io.EOF {
				break
			} else if err != nil {
				t.Fatal(err)
			}
		}
		for _, p := range idx {
			a, b := mem[int(p)*PageSize:(int(p)+1)*PageSize], dst[int(p)*PageSize:(int(p)+1)*PageSize]
			if !bytes.Equal(a, b) {
				t.Fatalf("page %d differs after the round trip", p)
			}
		}
	}
}

// writeCounter counts Write calls.
type writeCounter struct {
	bytes.Buffer
	writes int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes++
	return w.Buffer.Write(p)
}

// Frozen pages go to a writer without vectored writes (a TLS connection,
// a pipe) as one Write per PageBatch frame, not one per page and header,
// where they lie apart in memory; a run of adjacent pages of directPiece
// bytes or more is written where it lies, between its frame's headers and
// CRC (three writes for the frame); both read back.
func TestFrozenOneWritePerFrame(t *testing.T) {
	const pages = 600
	mem := make([]byte, pages*PageSize)
	for i := range mem {
		mem[i] = byte(i / PageSize)
	}
	hashes := make([]uint64, pages)
	for i := range hashes {
		hashes[i] = xxhash.Sum64(mem[i*PageSize : (i+1)*PageSize])
	}
	for _, c := range []struct {
		name   string
		idx    []uint32
		writes int
	}{
		{"every other page", everyOther(pages), 2}, // 256 + 44 pages, one write each
		{"adjacent pages", allPages(300), 3 + 3},   // 256 + 44 adjacent pages: headers, run, CRC each
	} {
		var cw writeCounter
		w, err := NewWriter(&cw)
		if err != nil {
			t.Fatal(err)
		}
		hs := make([]uint64, len(c.idx))
		for i, p := range c.idx {
			hs[i] = hashes[p]
		}
		before := cw.writes
		if _, err := w.WritePages(c.idx, mem, hs); err != nil {
			t.Fatal(err)
		}
		if got := cw.writes - before; got != c.writes {
			t.Errorf("%s: %d writes for 2 frames, want %d", c.name, got, c.writes)
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(mem))
		if _, err := readAll(cw.Bytes(), Limits{}, got); err != io.EOF {
			t.Fatalf("%s: read back: %v", c.name, err)
		}
		for _, p := range c.idx {
			if !bytes.Equal(got[int(p)*PageSize:(int(p)+1)*PageSize], mem[int(p)*PageSize:(int(p)+1)*PageSize]) {
				t.Fatalf("%s: page %d differs", c.name, p)
			}
		}
	}
}

// everyOther is pages 0, 2, 4, … below n.
func everyOther(n int) []uint32 {
	var idx []uint32
	for p := 0; p < n; p += 2 {
		idx = append(idx, uint32(p))
	}
	return idx
}
