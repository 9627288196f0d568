package dirty

import (
	"context"
	"errors"
	"math/rand/v2"
	"reflect"
	"testing"
)

// TestScanFrozenStream checks that the streamed scan finds what ScanFrozen
// finds — the same pages in order, by the same sources, hashing the pages
// the samples caught as well — that each page comes with its hash, and that chunks come
// in order, for several chunk sizes and worker counts.
func TestScanFrozenStream(t *testing.T) {
	const pages = 3000
	mem := randMem(t, pages, 5)
	r := rand.New(rand.NewPCG(5, 6))
	for _, workers := range []int{1, 3} {
		tr := newTracker(t, mem, Options{Workers: workers})
		recordAll(t, tr)
		tr.MarkWritten(7*PageSize, 3*PageSize) // engine
		for range 40 {                         // guest CPU: samples or hashes
			storeByte(mem, r.IntN(len(mem)), byte(r.Uint32()))
		}
		want, err := tr.ScanFrozen(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		for _, chunk := range []int{0, 1, 64, 1000, 5000} {
			var got []int
			last := -1
			res, err := tr.ScanFrozenStream(context.Background(), chunk, func(c ScanChunk) error {
				if len(c.Dirty) != len(c.Hashes) {
					t.Fatalf("%d pages, %d hashes", len(c.Dirty), len(c.Hashes))
				}
				for i, p := range c.Dirty {
					if int(p) <= last {
						t.Fatalf("page %d after %d", p, last)
					}
					last = int(p)
					got = append(got, int(p))
					if h := HashPage(tr.page(int(p))); c.Hashes[i] != h {
						t.Fatalf("page %d: hash %x, want %x", p, c.Hashes[i], h)
					}
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			// The streamed scan hashes the pages the samples caught too.
			wantHashed := want.PagesHashed + want.BySource[Sample]
			if !reflect.DeepEqual(got, want.Dirty) || res.BySource != want.BySource || res.PagesHashed != wantHashed {
				t.Fatalf("workers %d chunk %d: %d pages %v hashed %d, ScanFrozen %d %v %d",
					workers, chunk, len(got), res.BySource, res.PagesHashed, len(want.Dirty), want.BySource, wantHashed)
			}
		}
		// Re-record for the next worker count.
		recordAll(t, tr)
	}
	tr := newTracker(t, mem, Options{})
	stop := errors.New("stop")
	if _, err := tr.ScanFrozenStream(context.Background(), 100, func(ScanChunk) error { return stop }); !errors.Is(err, stop) {
		t.Fatalf("fn's error: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := tr.ScanFrozenStream(ctx, 100, func(ScanChunk) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
}
