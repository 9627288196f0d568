package dirty

import (
	"context"
	"sync"
	"time"
)

// BackgroundStats counts the work of one background re-hash run.
type BackgroundStats struct {
	Passes      int // completed passes over all pages
	PagesHashed int // full page hashes computed
	FoundDirty  int // pages newly marked dirty (source Background)
}

const (
	// bgBatch is how many pages the background examines between looks at
	// its budget and at stop: 256 KiB of memory.
	bgBatch = 64
	// bgMaxLag is how far the background may fall behind its budget (when
	// starved of CPU) before it stops trying to catch up.
	bgMaxLag = 100 * time.Millisecond
	// bgIdleWait is the pause after a pass that found nothing to examine
	// (every page already dirty or unrecorded), so an idle background does
	// not spin.
	bgIdleWait = 10 * time.Millisecond
)

// bgRun is one background re-hash run.
type bgRun struct {
	cancel context.CancelFunc
	done   chan struct{} // closed when the goroutine has returned

	mu     sync.Mutex
	stats  BackgroundStats
	passed chan struct{} // closed (and replaced) when a pass completes or the run ends
	ended  bool
}

// StartBackground starts re-hashing recorded pages on one goroutine while
// the VM runs, examining at most pagesPerSec pages a second on average (no
// limit if <= 0); pages already marked or never recorded are skipped at no
// cost to the budget. A page whose content no longer matches its recording
// (samples first, then the full hash, as in Scan) is marked dirty with
// source Background, so Scan need not hash it during the downtime. The run ends when ctx does
// or when stop is called; stop waits for the goroutine and returns the
// run's statistics. stop must be called, and may be called more than once.
// Only one run may exist at a time: calling StartBackground before the
// previous run's stop is a programming error and panics.
func (t *Tracker) StartBackground(ctx context.Context, pagesPerSec int) (stop func() BackgroundStats) {
	t.bgMu.Lock()
	defer t.bgMu.Unlock()
	if t.bg != nil {
		panic("dirty: StartBackground while a background re-hash exists")
	}
	ctx, cancel := context.WithCancel(ctx)
	run := &bgRun{cancel: cancel, done: make(chan struct{}), passed: make(chan struct{})}
	t.bg = run
	t.log.Debug().Int("pages", t.pages).Int("pages_per_sec", pagesPerSec).Msg("dirty: background re-hash started")
	go func() {
		defer close(run.done)
		t.background1(ctx, run, pagesPerSec)
		run.end()
	}()
	var once sync.Once
	var final BackgroundStats
	return func() BackgroundStats {
		once.Do(func() {
			cancel()
			<-run.done
			t.bgMu.Lock()
			t.bg = nil
			t.bgMu.Unlock()
			final = run.snapshot()
			t.log.Debug().Int("passes", final.Passes).Int("hashed", final.PagesHashed).
				Int("found_dirty", final.FoundDirty).Msg("dirty: background re-hash stopped")
		})
		return final
	}
}

// WaitPasses blocks until the current background run has completed at
// least n passes since it started. It fails with ErrNoBackground if there
// is no run, ErrBackgroundStopped if the run ends first, or ctx's error.
func (t *Tracker) WaitPasses(ctx context.Context, n int) error {
	t.bgMu.Lock()
	run := t.bg
	t.bgMu.Unlock()
	if run == nil {
		return ErrNoBackground
	}
	for {
		run.mu.Lock()
		passes, ended, passed := run.stats.Passes, run.ended, run.passed
		run.mu.Unlock()
		switch {
		case passes >= n:
			return nil
		case ended:
			return ErrBackgroundStopped
		}
		select {
		case <-passed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// background1 is the body of a background run.
func (t *Tracker) background1(ctx context.Context, run *bgRun, pagesPerSec int) {
	pace := pacer{perSec: pagesPerSec, start: time.Now()}
	buf := t.getBuf()
	defer t.putBuf(buf)
	for {
		examined := 0
		for lo := 0; lo < t.pages; lo += bgBatch {
			var checked, hashed, found int
			for p := lo; p < min(lo+bgBatch, t.pages); p++ {
				if t.engine.has(p) || t.background.has(p) || !t.recorded.has(p) {
					continue
				}
				checked++
				_, dirty, didHash := t.checkContent(p, buf, false)
				if didHash {
					hashed++
				}
				if dirty {
					// A Record of p since checkContent makes this mark
					// spurious: an extra page, never a missed one.
					t.background.set(p)
					found++
				}
			}
			run.add(hashed, found)
			examined += checked
			if !pace.wait(ctx, checked) {
				return
			}
		}
		run.pass()
		if examined == 0 && !sleepCtx(ctx, bgIdleWait) {
			return
		}
	}
}

func (r *bgRun) add(hashed, found int) {
	r.mu.Lock()
	r.stats.PagesHashed += hashed
	r.stats.FoundDirty += found
	r.mu.Unlock()
}

func (r *bgRun) pass() {
	r.mu.Lock()
	r.stats.Passes++
	close(r.passed)
	r.passed = make(chan struct{})
	r.mu.Unlock()
}

func (r *bgRun) end() {
	r.mu.Lock()
	r.ended = true
	close(r.passed)
	r.passed = make(chan struct{})
	r.mu.Unlock()
}

func (r *bgRun) snapshot() BackgroundStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// pacer holds a loop to perSec items a second on average.
type pacer struct {
	perSec int // <= 0: unlimited
	start  time.Time
	done   int // items since start
}

// wait counts n more items and blocks until the budget covers them. It
// returns false if ctx ended.
func (p *pacer) wait(ctx context.Context, n int) bool {
	if p.perSec <= 0 {
		return ctx.Err() == nil
	}
	p.done += n
	due := p.start.Add(time.Duration(float64(p.done) / float64(p.perSec) * float64(time.Second)))
	d := time.Until(due)
	if d <= 0 {
		if -d > bgMaxLag {
			p.start, p.done = time.Now(), 0
		}
		return ctx.Err() == nil
	}
	return sleepCtx(ctx, d)
}

// sleepCtx waits d or until ctx ends, reporting whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return true
	case <-ctx.Done():
		return false
	}
}
