package stream

import (
	"bufio"
	"bytes"
	"testing"
)

// FuzzReader feeds arbitrary bytes to a Reader, as they are and with their
// frame CRCs recomputed (so the fuzzer reaches the checks behind the CRC).
// Reading must end in an error or io.EOF, never panic, and never write
// outside the memory it was given.
func FuzzReader(f *testing.F) {
	data, _ := smallStream(f)
	f.Add(data)
	empty := cat(header(Version, 0, 0), end)
	f.Add(empty)
	f.Add(cat(header(Version, 0, 0),
		frame(PageBatch, 0, batch(2, record(0, RecordZero, zeroHash, nil), record(3, 0, goodHash, good))),
		frame(DeviceState, 0, []byte(`{"Version":1}`)), end))
	f.Add(cat(header(Version, 0, 0), frame(PageBatch, 0, batch(1, record(9, 0, goodHash, good))), end))
	f.Add([]byte(Magic))
	f.Add(cat(header(Version, 0, 0), frame(ShardHeader, 0, AppendShard(nil, Shard{Token: 1, Index: 1, Count: 2})),
		frame(PageBatch, 0, batch(1, record(1, 0, goodHash, good))), end))

	const pages = 4
	const guard = PageSize
	// One buffered reader for all inputs, which NewReader adopts: no
	// buffer per input.
	br := bufio.NewReaderSize(nil, readBufferSize)
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, d := range [][]byte{data, reseal(data)} {
			backing := bytes.Repeat([]byte{0xa5}, pages*PageSize+guard)
			mem := backing[:pages*PageSize] // cap reaches into the guard
			br.Reset(bytes.NewReader(d))
			r, err := NewReader(br, Limits{MaxPages: pages, MaxBatchPages: 8, MaxBlob: 1 << 16})
			if err != nil {
				continue
			}
			for range 1000 {
				s, err := r.Next(mem)
				if err != nil {
					break
				}
				if s.Pages > 8 || len(s.Blob) > 1<<16 {
					t.Fatalf("section beyond limits: %d pages, %d-byte blob", s.Pages, len(s.Blob))
				}
			}
			for i, b := range backing[pages*PageSize:] {
				if b != 0xa5 {
					t.Fatalf("wrote outside mem at byte %d past its end", i)
				}
			}
		}
	})
}
