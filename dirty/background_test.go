package dirty

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
)

func TestBackgroundFindsDirt(t *testing.T) {
	const pages = 300
	mem := randMem(t, pages, 20)
	tr := newTracker(t, mem, Options{Workers: 2})
	recordAll(t, tr)
	r := rand.New(rand.NewPCG(20, 20))
	mem[10*PageSize+offsetIn(t, tr, true, r)] ^= 1  // sample-dirty
	mem[20*PageSize+offsetIn(t, tr, false, r)] ^= 1 // hash-dirty
	mem[30*PageSize+offsetIn(t, tr, false, r)] ^= 1 // hash-dirty, engine-marked
	tr.MarkWritten(30*PageSize, 1)

	// Without the background, the scan hashes the hash-dirty page 20.
	before := scan(t, tr)

	ctx := t.Context()
	stop := tr.StartBackground(ctx, 1<<30)
	if err := tr.WaitPasses(ctx, 2); err != nil {
		t.Fatal(err)
	}
	st := stop()
	if st.Passes < 2 || st.FoundDirty != 2 {
		t.Fatalf("stats %+v: want >= 2 passes, 2 found dirty", st)
	}
	// Pass 1 hashes all but the sample-dirty and the engine-marked page;
	// pass 2 skips page 20 as well.
	if min := (pages - 2) + (pages - 3); st.PagesHashed < min {
		t.Fatalf("stats %+v: want >= %d pages hashed", st, min)
	}
	if again := stop(); again != st {
		t.Fatalf("second stop: %+v, first %+v", again, st)
	}

	after := scan(t, tr)
	if !slices.Equal(after.Dirty, []int{10, 20, 30}) || !slices.Equal(before.Dirty, after.Dirty) {
		t.Fatalf("dirty %v before the background, %v after; want [10 20 30]", before.Dirty, after.Dirty)
	}
	if want := [NumSources]int{Engine: 1, Background: 2}; after.BySource != want {
		t.Fatalf("BySource %v, want %v", after.BySource, want)
	}
	if before.PagesHashed != pages-2 || after.PagesHashed != pages-3 {
		t.Fatalf("pages hashed %d before, %d after; want %d, %d", before.PagesHashed, after.PagesHashed, pages-2, pages-3)
	}
}

func TestBackgroundStop(t *testing.T) {
	tr := newTracker(t, randMem(t, 4*bgBatch, 21), Options{})
	recordAll(t, tr)

	// One page a second: the run is waiting on its budget after the first
	// batch, and stop must cut the wait short.
	stop := tr.StartBackground(context.Background(), 1)
	func() {
		defer func() {
			if recover() == nil {
				t.Error("second StartBackground did not panic")
			}
		}()
		tr.StartBackground(context.Background(), 1)
	}()
	st := stop()
	if st.Passes != 0 || st.PagesHashed > bgBatch || st.FoundDirty != 0 {
		t.Fatalf("stats %+v: want no pass, at most one batch", st)
	}
	if err := tr.WaitPasses(context.Background(), 1); !errors.Is(err, ErrNoBackground) {
		t.Fatalf("WaitPasses after stop: %v", err)
	}

	// A run whose context ends reports it to waiters.
	ctx, cancel := context.WithCancel(context.Background())
	stop = tr.StartBackground(ctx, 1)
	cancel()
	if err := tr.WaitPasses(context.Background(), 1); !errors.Is(err, ErrBackgroundStopped) {
		t.Fatalf("WaitPasses after cancel: %v", err)
	}
	stop()

	// The waiter's own context.
	stop = tr.StartBackground(context.Background(), 1)
	wctx, wcancel := context.WithCancel(context.Background())
	wcancel()
	if err := tr.WaitPasses(wctx, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitPasses with canceled context: %v", err)
	}
	stop()
}

func TestBackgroundIdle(t *testing.T) {
	// Nothing recorded: passes complete without hashing anything.
	tr := newTracker(t, randMem(t, 10, 22), Options{})
	stop := tr.StartBackground(t.Context(), 0)
	if err := tr.WaitPasses(t.Context(), 3); err != nil {
		t.Fatal(err)
	}
	if st := stop(); st.Passes < 3 || st.PagesHashed != 0 || st.FoundDirty != 0 {
		t.Fatalf("stats %+v", st)
	}
	if res := scan(t, tr); res.BySource[Unrecorded] != 10 {
		t.Fatalf("BySource %v", res.BySource)
	}
}

// TestConcurrent runs everything at once while the VM would be running: the
// engine marks pages, the guest writes others (with storeByte, see the
// package comment), pages are re-recorded as if re-sent, the background
// re-hashes and scans run. Mid-flight scans may only report pages that were
// touched; the final scan, once all writers are done, must report exactly
// those.
func TestConcurrent(t *testing.T) {
	const pages = 512
	mem := randMem(t, pages, 23)
	orig := slices.Clone(mem)
	tr := newTracker(t, mem, Options{Workers: 4})
	recordAll(t, tr)
	ctx := t.Context()
	stop := tr.StartBackground(ctx, 0)

	// Engine: ranges within pages [0, 256).
	engineSet := map[int]bool{}
	r := rand.New(rand.NewPCG(23, 23))
	type span struct{ off, n uint64 }
	var spans []span
	for range 500 {
		off := uint64(r.IntN(200 * PageSize))
		n := uint64(1 + r.IntN(3*PageSize))
		spans = append(spans, span{off, n})
		for p := off / PageSize; p <= (off+n-1)/PageSize; p++ {
			engineSet[int(p)] = true
		}
	}
	// Guest: every third page of [384, 512), bytes set to a value that
	// differs from the original, so the page stays changed.
	var guestSet []int
	for p := 384; p < pages; p += 3 {
		guestSet = append(guestSet, p)
	}
	touched := func(p int) bool { return engineSet[p] || slices.Contains(guestSet, p) }

	var wg sync.WaitGroup
	wg.Go(func() {
		for _, s := range spans {
			tr.MarkWritten(s.off, s.n)
		}
	})
	wg.Go(func() {
		r := rand.New(rand.NewPCG(24, 24))
		for range 2000 {
			p := guestSet[r.IntN(len(guestSet))]
			off := p*PageSize + r.IntN(PageSize)
			storeByte(mem, off, orig[off]^0x5a)
		}
	})
	wg.Go(func() {
		// Pages [256, 384) are re-sent over and over; they never change.
		for i := range 50 {
			if _, err := tr.Record(seq(256+i%2, 384), nil); err != nil {
				t.Error(err)
				return
			}
			tr.ClearPages([]int{256, 300})
		}
	})
	wg.Go(func() {
		for range 5 {
			res, err := tr.Scan(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			for _, p := range res.Dirty {
				if !touched(p) {
					t.Errorf("mid-flight scan: untouched page %d dirty", p)
				}
			}
		}
	})
	wg.Wait()
	if err := tr.WaitPasses(ctx, 1); err != nil {
		t.Fatal(err)
	}
	stop()

	var want []int
	for p := range pages {
		if touched(p) {
			want = append(want, p)
		}
	}
	res := scan(t, tr)
	if !slices.Equal(res.Dirty, want) {
		t.Fatalf("dirty %v\nwant %v", res.Dirty, want)
	}
	if res.BySource[Engine] != len(engineSet) || res.BySource[Unrecorded] != 0 {
		t.Fatalf("BySource %v, want %d engine", res.BySource, len(engineSet))
	}
	for _, p := range guestSet {
		if s, _ := sourceOf(tr, p); s == Engine || s == Unrecorded {
			t.Fatalf("guest page %d: source %v", p, s)
		}
	}
}
