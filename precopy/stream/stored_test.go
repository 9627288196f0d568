package stream

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"
)

// TestReaderStored: SetStored reports every PageBatch once its pages are
// in mem, on the direct path (no workers) and the parallel one (4): the
// reports list the batches' pages in stream order, each page holding the
// bytes its batch carried when the report comes (zero pages cleared, a
// page sent again in a later batch not yet overwritten); a batch with a
// corrupt page, or a broken CRC, is not reported, nor any after it.
func TestReaderStored(t *testing.T) {
	const pages, batchPages, rounds = 32, 4, 5
	var s bytes.Buffer
	w, err := NewWriterSize(&s, batchPages)
	if err != nil {
		t.Fatal(err)
	}
	var sent []uint32    // page indices in stream order
	var content [][]byte // what each of them carried
	mem := make([]byte, pages*PageSize)
	for round := range rounds {
		var idx []uint32
		for p := round % 2; p < pages; p += 1 + round%3 {
			v := byte(round*pages + p + 1)
			if p == 7 {
				v = 0 // a zero page
			}
			copy(mem[p*PageSize:], filledPage(v))
			idx = append(idx, uint32(p))
			sent = append(sent, uint32(p))
			content = append(content, filledPage(v))
		}
		if _, err := w.WritePages(idx, mem, nil); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}

	// read reads data into fresh memory and returns the reported pages
	// and Next's (or Wait's) error; each report is checked against mem.
	read := func(t *testing.T, data []byte, workers int) ([]uint32, error) {
		into := make([]byte, len(mem))
		r, err := NewReader(bytes.NewReader(data), Limits{})
		if err != nil {
			t.Fatal(err)
		}
		r.SetWorkers(workers)
		var got []uint32
		r.SetStored(func(idx []uint32) {
			if len(idx) == 0 || len(idx) > batchPages {
				t.Errorf("a report of %d pages, batches hold 1 … %d", len(idx), batchPages)
			}
			for _, p := range idx {
				i := len(got)
				if i >= len(sent) || sent[i] != p {
					t.Errorf("report %d is page %d, want the stream's order", i, p)
				} else if !bytes.Equal(into[p*PageSize:(p+1)*PageSize], content[i]) {
					t.Errorf("page %d (report %d) does not hold its batch's bytes when reported", p, i)
				}
				got = append(got, p)
			}
		})
		for {
			_, err := r.Next(into)
			if err == io.EOF {
				return got, r.Wait()
			}
			if err != nil {
				_ = r.Wait()
				return got, err
			}
		}
	}

	data := s.Bytes()
	// The third batch broken: its first page's data (a hash failure), or
	// its CRC.
	third := 2 * batchPages
	at := bytes.Index(data, content[third])
	if at < 0 {
		t.Fatal("page not found in the stream")
	}
	badPage := bytes.Clone(data)
	badPage[at+99] ^= 1
	badCRC := bytes.Clone(data)
	crcAt := crcOffsetOfBatch(t, badCRC, 2)
	badCRC[crcAt] ^= 1

	for _, workers := range []int{1, 4} {
		t.Run(fmt.Sprintf("workers=%d", workers), func(t *testing.T) {
			got, err := read(t, data, workers)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, sent) {
				t.Fatalf("%d pages reported, want all %d in stream order", len(got), len(sent))
			}
			for _, c := range []struct {
				name string
				data []byte
				want error
			}{{"page", badPage, ErrPageHash}, {"crc", badCRC, ErrChecksum}} {
				got, err := read(t, c.data, workers)
				if !errors.Is(err, c.want) {
					t.Fatalf("%s: %v, want %v", c.name, err, c.want)
				}
				if len(got) != third {
					t.Errorf("%s: %d pages reported, want the %d of the batches before the bad one", c.name, len(got), third)
				}
			}
		})
	}
}

// crcOffsetOfBatch is the offset of the n-th (from 0) section's CRC in a
// stream of PageBatch sections.
func crcOffsetOfBatch(t *testing.T, data []byte, n int) int {
	t.Helper()
	off := HeaderSize
	for range n {
		off += FrameHeaderSize + int(le.Uint32(data[off+4:])) + FrameTrailerSize
	}
	if SectionType(data[off]) != PageBatch {
		t.Fatalf("section %d is %v", n, SectionType(data[off]))
	}
	return off + FrameHeaderSize + int(le.Uint32(data[off+4:]))
}
