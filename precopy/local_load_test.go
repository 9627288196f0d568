package precopy

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/precopy/stream"
)

// The destination loads the stop phase's device-local pages to the GPU
// while they arrive (local_load.go), on the CUDA model
// (GMIG_CUDA_MODEL=2).

// countingLoader records the destination's loads to the GPU and fails the
// failAt-th (from 1; 0: none) with errInjected.
type countingLoader struct {
	localLoader
	failAt int

	mu    sync.Mutex
	calls [][]int
}

func (c *countingLoader) LoadLocal(pages []int, mem []byte) error {
	c.mu.Lock()
	c.calls = append(c.calls, slices.Clone(pages))
	n := len(c.calls)
	c.mu.Unlock()
	if n == c.failAt {
		return errInjected
	}
	return c.localLoader.LoadLocal(pages, mem)
}

// loads returns the calls so far.
func (c *countingLoader) loads() [][]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.calls)
}

// withLoader makes the test's Receives load through c, in chunks of
// chunk pages.
func withLoader(t *testing.T, c *countingLoader, chunk int) {
	saveWrap, saveChunk := wrapLoader, loadChunkPages
	wrapLoader = func(l localLoader) localLoader { c.localLoader = l; return c }
	loadChunkPages = chunk
	t.Cleanup(func() { wrapLoader, loadChunkPages = saveWrap, saveChunk })
}

// loaderGoroutines returns the stacks of goroutines still inside the
// destination's loader or its extra streams' readers.
func loaderGoroutines() []string {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var left []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if strings.Contains(g, "precopy.(*stopLoader).run(") || strings.Contains(g, "precopy.(*dest).readShard(") {
			left = append(left, g)
		}
	}
	return left
}

// TestGPULocalLoadsDuringStop: the stop phase's local pages go to the
// destination's GPU while the streams still arrive, in chunks (of 256
// pages here, over 10340 local pages), on 1 and 4 streams, one-shot and
// stop-and-copy: the destination's local memory equals the source's, its
// host range holds no page, and loads were done before the restore
// (StopReport.LocalPagesEarly). One-shot: the pre-copy sends every local
// page; none is flushed (fewer than flushPages), so all are the leftover
// loaded first at the stop, or (flushed) all but the last 2148 are
// flushed in 4096-page loads and those are the leftover; 600 pages change
// before the stop (300 at the start, the last 300, in the leftover) and
// arrive again: each is loaded twice, every other page once, and the GPU
// holds the stop bytes.
func TestGPULocalLoadsDuringStop(t *testing.T) {
	const n = int(ringLocal / stream.PageSize)
	for _, c := range []struct {
		name     string
		strategy Strategy
		streams  int
		flush    int64 // flushPages; 0: the default
	}{
		{"oneshot/streams=1", OneShot, 1, 0},
		{"oneshot/streams=4", OneShot, 4, 0},
		{"oneshot/flushed/streams=4", OneShot, 4, 4096},
		{"stopcopy/streams=1", StopCopy, 1, 0},
		{"stopcopy/streams=4", StopCopy, 4, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			if c.flush > 0 {
				save := flushPages
				flushPages = c.flush
				t.Cleanup(func() { flushPages = save })
			}
			if c.flush == 0 && int64(n) >= flushPages {
				t.Fatalf("flushPages %d: the pre-copy would flush", flushPages)
			}
			ld := &countingLoader{}
			withLoader(t, ld, 256)
			src, dst := cudaLocalPairSized(t, ringLocal, "")
			s, recv, _ := startOnStreams(ctx, t, src.V, dst.V, c.streams, Options{Strategy: c.strategy,
				Workers: PipelineMinWorkers, Log: migtest.Log})
			must(t, s.Precopy(ctx))
			scribbleLocal(t, src.V, 1, 2, 300)
			scribbleLocal(t, src.V, n-300, 1, 300)
			rep, err := s.Stop(ctx)
			must(t, err)
			r := <-recv
			must(t, r.err)

			if n := hostResident(t, dst.V); n != 0 {
				t.Errorf("the destination's host local range holds %d resident pages, want 0 (all on its GPU)", n)
			}
			if sl, dl := readGPULocal(t, src.V), readGPULocal(t, dst.V); string(sl) != string(dl) {
				t.Fatal("the destination's local memory differs from the source's")
			}
			loads := ld.loads()
			changed := map[int]bool{}
			wantStop := n
			if c.strategy == OneShot {
				wantStop = 600
				for i := range 300 {
					changed[1+2*i], changed[n-300+i] = true, true
				}
			}
			// The pre-copy's loads (its flushes, then the leftover, all
			// of local memory) come before the stop phase's.
			pre, i := 0, 0
			for ; c.strategy == OneShot && i < len(loads) && pre < n; i++ {
				pre += len(loads[i])
			}
			if c.strategy == OneShot {
				leftover := loads[i-1]
				if pre != n || i != 1+int(int64(n)/flushPages) || !slices.Contains(leftover, n-1) {
					t.Fatalf("the pre-copy's %d pages loaded in %d loads, the last (the leftover, %d pages) without the last page; want %d in %d",
						pre, i, len(leftover), n, 1+int(int64(n)/flushPages))
				}
			}
			times := make([]int, n)
			for _, l := range loads {
				for _, p := range l {
					times[p]++
				}
			}
			for p, k := range times {
				if want := map[bool]int{false: 1, true: 2}[changed[p]]; k != want {
					t.Fatalf("local page %d loaded %d times, want %d (changed before the stop: %v)", p, k, want, changed[p])
				}
			}
			if rep.Stop.LocalPages != wantStop {
				t.Errorf("%d local pages at the stop, want %d", rep.Stop.LocalPages, wantStop)
			}
			stopLoads := loads[i:]
			got := len(slices.Concat(stopLoads...))
			// How many loads the stop phase's pages take depends on
			// how they arrive against the loader (all may queue while
			// it loads the leftover): only the count is fixed.
			if got != wantStop || len(stopLoads) == 0 {
				t.Errorf("the stop phase loaded %d pages in %d loads, want %d", got, len(stopLoads), wantStop)
			}
			for i, l := range stopLoads[:max(len(stopLoads)-1, 0)] {
				if len(l) < 256 {
					t.Errorf("stop-phase load %d of %d pages, want a chunk of 256 or more (only the last may be less)", i, len(l))
				}
			}
			st := r.rep.Stop
			// One-shot: the leftover is loaded at the stop Meta, before
			// any stop-phase page can be stored, so some loads always
			// come before the restore. Stop-and-copy has no leftover:
			// whether the loader ran before the last stream ended
			// depends on the scheduler, so there only the bound holds.
			all := len(slices.Concat(loads...))
			if st.LocalPagesEarly > all || (c.strategy == OneShot && st.LocalPagesEarly == 0) {
				t.Errorf("%d pages loaded before the restore (of %d loaded in all), want some", st.LocalPagesEarly, all)
			}
			t.Logf("%d loads; before the restore %d pages in %v; in the restore %v", len(loads), st.LocalPagesEarly, st.LocalLoadEarly, st.LocalLoad)
		})
	}
}

// TestGPULocalLoadFails: a load to the GPU failing mid-stop (the first
// load of the stop phase's pages: how many loads the pages take depends on
// how they queue against the loader, which takes the whole queue at a
// time, so a later one may never come), or an extra stream
// killed while local pages go over it, fails Receive — with the injected
// error where a load failed — and no loader nor extra stream's reader
// outlives it; the source is refused and rolls back.
func TestGPULocalLoadFails(t *testing.T) {
	for _, c := range []struct {
		name    string
		streams int
		failAt  int  // the load that fails
		kill    bool // cut extra stream 1 after its second batch
	}{
		{name: "load/streams=1", streams: 1, failAt: 1},
		{name: "load/streams=4", streams: 4, failAt: 1},
		{name: "stream killed/streams=4", streams: 4, kill: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			ld := &countingLoader{failAt: c.failAt}
			withLoader(t, ld, 256)
			src, dst := cudaLocalPairSized(t, ringLocal, "")
			s, a, recv := startCuttable(ctx, t, src.V, dst.V, c.streams, c.kill, Options{Strategy: StopCopy, Workers: 2, Log: migtest.Log})
			defer s.Close()
			must(t, s.Precopy(ctx))
			if _, err := s.Stop(ctx); err == nil {
				t.Error("the source's Stop succeeded")
			}
			s.Rollback()
			a.Close() // the destination reads its connection until the source closes it
			var r received
			select {
			case r = <-recv:
			case <-time.After(time.Minute):
				t.Fatalf("Receive hangs; its goroutines:\n%s", strings.Join(loaderGoroutines(), "\n\n"))
			}
			switch {
			case r.err == nil:
				t.Fatal("the destination accepted the migration")
			case c.failAt > 0 && !errors.Is(r.err, errInjected):
				t.Errorf("Receive: %v, want the injected load failure", r.err)
			}
			if left := loaderGoroutines(); len(left) > 0 {
				t.Errorf("%d goroutines of the destination's stop phase outlive Receive:\n%s", len(left), strings.Join(left, "\n\n"))
			}
			if c.failAt > 0 && len(ld.loads()) != c.failAt {
				t.Errorf("%d loads, want none after the failed one (%d)", len(ld.loads()), c.failAt)
			}
			t.Logf("destination: %v", r.err)
		})
	}
}
