package stream

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"
)

// A shard stream round-trips: its ShardHeader comes back as Section.Shard
// and its pages land in memory.
func TestShardRoundTrip(t *testing.T) {
	src := bytes.Repeat([]byte{3}, 4*PageSize)
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	want := Shard{Token: 0x1122334455667788, Index: 2, Count: 3}
	if err := w.WriteShard(want); err != nil {
		t.Fatal(err)
	}
	if _, err := w.WritePages([]uint32{1, 3}, src, nil); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteShard(want); !errors.Is(err, ErrMalformed) {
		t.Errorf("a second ShardHeader written: %v, want ErrMalformed", err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	mem := make([]byte, len(src))
	secs, err := readAll(buf.Bytes(), Limits{}, mem)
	if err.Error() != "EOF" || len(secs) != 2 || secs[0].Type != ShardHeader || secs[0].Shard != want {
		t.Fatalf("sections %+v, err %v", secs, err)
	}
	if !bytes.Equal(mem[PageSize:2*PageSize], src[:PageSize]) || !bytes.Equal(mem[3*PageSize:], src[:PageSize]) {
		t.Error("shard stream's pages not stored")
	}
}

// ShardHeader sections that a reader must refuse: in a version 2 stream,
// after another section, malformed payloads.
func TestShardRefused(t *testing.T) {
	good := AppendShard(nil, Shard{Token: 1, Index: 1, Count: 2})
	bad := func(f func(b []byte)) []byte {
		b := bytes.Clone(good)
		f(b)
		return b
	}
	for _, tc := range []struct {
		name    string
		data    []byte
		want    error
		mention string
	}{
		{"not first", cat(header(Version, 0, 0), frame(Meta, 0, nil), frame(ShardHeader, 0, good), end), ErrMalformed, "first"},
		{"short", cat(header(Version, 0, 0), frame(ShardHeader, 0, good[:15]), end), ErrMalformed, "15"},
		{"index 0", cat(header(Version, 0, 0), frame(ShardHeader, 0, bad(func(b []byte) { b[8] = 0 })), end), ErrMalformed, "stream 0 of 2"},
		{"index = count", cat(header(Version, 0, 0), frame(ShardHeader, 0, bad(func(b []byte) { b[8] = 2 })), end), ErrMalformed, "stream 2 of 2"},
		{"count 1", cat(header(Version, 0, 0), frame(ShardHeader, 0, bad(func(b []byte) { b[8], b[10] = 0, 1 })), end), ErrMalformed, "of 1"},
		{"count over MaxShards", cat(header(Version, 0, 0), frame(ShardHeader, 0, bad(func(b []byte) { b[10] = MaxShards + 1 })), end), ErrMalformed, "of 65"},
		{"reserved", cat(header(Version, 0, 0), frame(ShardHeader, 0, bad(func(b []byte) { b[15] = 1 })), end), ErrReserved, "reserved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := readAll(tc.data, Limits{}, nil)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.mention) {
				t.Errorf("got %v, want %v mentioning %q", err, tc.want, tc.mention)
			}
		})
	}
}

// Readers sharing a claim refuse a page that another stream of the phase
// brought, on the serial and the parallel path, before storing it.
func TestClaimRefusesPageTwice(t *testing.T) {
	for _, workers := range []int{0, 4} {
		var mu sync.Mutex
		seen := map[uint32]bool{}
		claim := func(p uint32) bool {
			mu.Lock()
			defer mu.Unlock()
			if seen[p] {
				return false
			}
			seen[p] = true
			return true
		}
		mem := make([]byte, 4*PageSize)
		read := func(data []byte) error {
			r, err := NewReader(bytes.NewReader(data), Limits{})
			if err != nil {
				return err
			}
			r.SetWorkers(workers)
			r.SetClaim(claim)
			for {
				if _, err := r.Next(mem); err != nil {
					return err
				}
			}
		}
		one := cat(header(Version, 0, 0), frame(PageBatch, 0, batch(2, record(0, 0, goodHash, good), record(2, 0, goodHash, good))), end)
		other := cat(header(Version, 0, 0), frame(PageBatch, 0, batch(2, record(1, 0, hashOf(filledPage(9)), filledPage(9)), record(2, 0, hashOf(filledPage(9)), filledPage(9)))), end)
		if err := read(one); err.Error() != "EOF" {
			t.Fatalf("workers %d: first stream: %v", workers, err)
		}
		err := read(other)
		if !errors.Is(err, ErrPageClaimed) || !strings.Contains(err.Error(), "page 2") {
			t.Errorf("workers %d: page 2 on a second stream: %v, want ErrPageClaimed naming it", workers, err)
		}
		if !bytes.Equal(mem[2*PageSize:3*PageSize], good) {
			t.Errorf("workers %d: the refused batch overwrote page 2", workers)
		}
	}
}

// FuzzParseShard: any 16 bytes either parse into a shard of a valid count
// and index that encodes back to the same bytes, or are refused.
func FuzzParseShard(f *testing.F) {
	f.Add(AppendShard(nil, Shard{Token: 7, Index: 1, Count: 2}))
	f.Add(AppendShard(nil, Shard{Token: 0, Index: 63, Count: 64}))
	f.Add(make([]byte, ShardSize))
	f.Add([]byte("short"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseShard(b)
		if err != nil {
			if !errors.Is(err, ErrMalformed) && !errors.Is(err, ErrReserved) {
				t.Fatalf("refusal %v wraps neither ErrMalformed nor ErrReserved", err)
			}
			return
		}
		if s.Count < 2 || s.Count > MaxShards || s.Index < 1 || s.Index >= s.Count {
			t.Fatalf("accepted %+v", s)
		}
		if !bytes.Equal(AppendShard(nil, s), b) {
			t.Fatalf("%+v encodes to %x, parsed from %x", s, AppendShard(nil, s), b)
		}
	})
}
