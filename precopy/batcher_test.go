package precopy

import (
	"slices"
	"testing"
)

// The stop phase's pages reach the streams in whole batches, however few
// pages each call brings, in the order they were found, with their
// hashes; what is left at the end is split over the streams; with own,
// the caller's slices may change after the call.
func TestBatcherWholeBatches(t *testing.T) {
	for _, own := range []bool{false, true} {
		var got []pageJob
		b := batcher{size: 8, own: own, out: func(j pageJob) { got = append(got, j) }}
		var idx []uint32
		var hashes []uint64
		buf, hbuf := make([]uint32, 3), make([]uint64, 3)
		for p := range uint32(30) { // 10 calls of 3 pages
			buf[p%3], hbuf[p%3] = p, uint64(p)*7
			if p%3 == 2 {
				b.add(buf, hbuf)
				idx, hashes = append(idx, buf...), append(hashes, hbuf...)
				if own {
					clear(buf) // the caller reuses its slices
					clear(hbuf)
				}
			}
		}
		b.finish(4) // 30 = 3 batches of 8, then 6 over 4 streams: 2+2+2
		var sizes []int
		var gotIdx []uint32
		var gotHashes []uint64
		for _, j := range got {
			sizes = append(sizes, len(j.idx))
			gotIdx, gotHashes = append(gotIdx, j.idx...), append(gotHashes, j.hashes...)
		}
		if want := []int{8, 8, 8, 2, 2, 2}; !slices.Equal(sizes, want) {
			t.Errorf("own %v: batches of %v pages, want %v", own, sizes, want)
		}
		if !slices.Equal(gotIdx, idx) || !slices.Equal(gotHashes, hashes) {
			t.Errorf("own %v: pages %v hashes %v, want %v %v", own, gotIdx, gotHashes, idx, hashes)
		}
	}
}

// A batch's pages all come with hashes or all without: a change flushes
// what was gathered; a call of many pages goes in whole batches.
func TestBatcherHashesOrNot(t *testing.T) {
	var got []pageJob
	b := batcher{size: 4, out: func(j pageJob) { got = append(got, j) }}
	b.add([]uint32{1, 2}, []uint64{10, 20})
	b.add([]uint32{3, 4, 5, 6, 7, 8, 9, 10, 11}, nil)
	b.finish(2)
	want := []pageJob{
		{idx: []uint32{1, 2}, hashes: []uint64{10, 20}},
		{idx: []uint32{3, 4, 5, 6}}, {idx: []uint32{7, 8, 9, 10}},
		{idx: []uint32{11}},
	}
	if len(got) != len(want) {
		t.Fatalf("%d batches %v, want %v", len(got), got, want)
	}
	for i := range want {
		if !slices.Equal(got[i].idx, want[i].idx) || !slices.Equal(got[i].hashes, want[i].hashes) || (got[i].hashes == nil) != (want[i].hashes == nil) {
			t.Errorf("batch %d: %v, want %v", i, got[i], want[i])
		}
	}
}
