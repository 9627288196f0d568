package dirty

import (
	"context"
	"sync"
	"sync/atomic"
)

// forChunks calls fn for the chunks [lo, hi) of [0, n), chunk items each, on
// up to workers goroutines that take chunks in turn. w identifies the calling
// goroutine (0 <= w < workers) for per-goroutine accumulators, and buf is
// its own page buffer. Once ctx is done no further chunk starts and ctx's
// error is returned; chunks already started finish.
func (t *Tracker) forChunks(ctx context.Context, n, chunk, workers int, fn func(w, lo, hi int, buf []byte)) error {
	chunks := (n + chunk - 1) / chunk
	workers = max(1, min(workers, chunks))
	var next atomic.Int64
	run := func(w int) {
		buf := t.getBuf()
		defer t.putBuf(buf)
		for ctx.Err() == nil {
			c := int(next.Add(1) - 1)
			if c >= chunks {
				return
			}
			fn(w, c*chunk, min((c+1)*chunk, n), buf)
		}
	}
	if workers == 1 {
		run(0)
		return ctx.Err()
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() { run(w) })
	}
	wg.Wait()
	return ctx.Err()
}
