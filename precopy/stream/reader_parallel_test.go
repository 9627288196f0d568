package stream

import (
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/cespare/xxhash/v2"
)

// TestReaderParallel checks the parallel PageBatch path: pages land as the
// serial reader stores them — a page sent twice ends as its later copy,
// zero pages are cleared — and a corrupt page or CRC is refused by End
// with the serial reader's error.
func TestReaderParallel(t *testing.T) {
	const pages = 64
	page := func(v byte) []byte { return bytes.Repeat([]byte{v}, PageSize) }
	var s bytes.Buffer
	w, _ := NewWriterSize(&s, 4)
	mem := make([]byte, pages*PageSize)
	for round := range 6 {
		for p := range pages {
			copy(mem[p*PageSize:], page(byte(round*pages+p+1)))
		}
		copy(mem[5*PageSize:], make([]byte, PageSize)) // a zero page
		idx := make([]uint32, 0, pages)
		for p := round % 3; p < pages; p += 1 + round%3 {
			idx = append(idx, uint32(p))
		}
		if _, err := w.WritePages(idx, mem, nil); err != nil {
			t.Fatal(err)
		}
	}
	// What the serial reader makes of it.
	want := make([]byte, len(mem))
	for i := range want {
		want[i] = 0xee
	}
	got := bytes.Clone(want)
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	read := func(data, into []byte, workers int) error {
		r, err := NewReader(bytes.NewReader(data), Limits{})
		if err != nil {
			return err
		}
		r.SetWorkers(workers)
		for {
			if _, err := r.Next(into); err == io.EOF {
				return r.Wait()
			} else if err != nil {
				if werr := r.Wait(); werr != nil && !errors.Is(err, werr) {
					t.Errorf("Wait %v after Next %v", werr, err)
				}
				return err
			}
		}
	}
	if err := read(s.Bytes(), want, 1); err != nil {
		t.Fatal(err)
	}
	if err := read(s.Bytes(), got, 4); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the parallel reader stored other pages than the serial one")
	}

	// A page whose data no longer matches its hash, then a broken CRC.
	data := s.Bytes()
	at := bytes.Index(data, page(byte(3*pages+9)))
	if at < 0 {
		t.Fatal("page not found in the stream")
	}
	bad := bytes.Clone(data)
	bad[at+100] ^= 1
	if err := read(bad, make([]byte, len(mem)), 4); !errors.Is(err, ErrPageHash) {
		t.Fatalf("corrupt page: %v, want %v", err, ErrPageHash)
	}
	// A flipped hash field that still matches nothing: flip a record's
	// reserved byte instead, which the structure check refuses at once.
	rec := bytes.Index(data, le.AppendUint64(nil, xxhash.Sum64(page(byte(3*pages+9))))) - 8
	if rec < 0 || rec > at {
		t.Fatalf("record header not before its page")
	}
	bad = bytes.Clone(data)
	bad[rec+6] = 1
	if err := read(bad, make([]byte, len(mem)), 4); !errors.Is(err, ErrReserved) {
		t.Fatalf("reserved byte: %v, want %v", err, ErrReserved)
	}
	bad = bytes.Clone(data)
	bad[rec+8] ^= 1 // the hash, which the CRC covers
	if err := read(bad, make([]byte, len(mem)), 4); !errors.Is(err, ErrChecksum) {
		t.Fatalf("changed hash: %v, want %v", err, ErrChecksum)
	}
	if err := read(reseal(bad), make([]byte, len(mem)), 4); !errors.Is(err, ErrPageHash) {
		t.Fatalf("changed hash, CRC resealed: %v, want %v", err, ErrPageHash)
	}
}
