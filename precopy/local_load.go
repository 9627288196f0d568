package precopy

import (
	"fmt"
	"slices"
	"sync"
	"time"
)

// The stop phase's device-local pages go to the GPU while later pages
// still arrive (the destination's half of the stop phase; local_dest.go is
// the pre-copy's). At the stop Meta, once the main stream's pre-copy pages
// are stored (receive waits for its reader), the sink starts a loader: a
// goroutine that copies stored local pages to the GPU in chunks of at
// least loadChunkPages while the streams' readers store the rest. The
// pre-copy's last noted pages (fewer than flushPages, never flushed) go
// first; then every stream's reader reports each batch it stored
// (stream.Reader.SetStored) and the loader queues the batch's local pages.
// restore, once every stream has ended and every reader is waited for,
// closes the queue and waits while the loader loads what is left: only
// that, and a chunk in flight, stay in the downtime's restore term
// (StopReport.LocalLoad); what the loader did before is LocalLoadEarly.
//
// Why the GPU ends with every page's last bytes. A page's bytes on the
// GPU are those of its last load, which reads the page in the receive
// buffer as it is then. A page is queued only once a batch that carries
// it is stored (its bytes in place and verified), so a load of it comes
// after that store. In the stop phase a page comes once on one stream
// (several streams share a claim that refuses a second copy; one stream
// carries each changed page once), and it is queued after its store, so
// its one stop-phase load reads its stop bytes. A pre-copy page loaded
// before the stop is superseded by a later load of the page if it comes
// again. The one page with two loads in flight around the stop is a page
// of the pre-copy's leftover that comes again at the stop: the leftover
// is loaded first, and the stop phase's claim of such a page waits until
// that load is over (stopClaim), so its stop copy is stored, reported and
// loaded after it — the last load reads the stop bytes, and no load reads
// a page while a reader writes it. restore waits for the loader, so every
// queued page is loaded before the vGPU is restored: the end state is
// what one load of the noted pages after the last stream gave.
//
// A failed load ends the loader and the Receive (its context is cancelled
// with the error, and receive returns it); receive stops the loader on
// every way out, once no reader stores any more, so no load runs after
// Receive returns.

// loadChunkPages is how many stored local pages the stop phase's loader
// gathers before a load: 8 MiB, under half a millisecond of PCIe, while
// a call's fixed cost (a GPU worker's round trip) stays small beside it.
// A variable so that tests can load in smaller chunks.
var loadChunkPages = 2048

// stopLoader is a localSink's loader of the stop phase's pages.
type stopLoader struct {
	k        *localSink
	fail     func(error)   // ends the Receive with the loader's error
	wake     chan struct{} // a chunk is queued, or the queue closed
	done     chan struct{} // closed when the loader has ended
	leftover chan struct{} // closed when the pre-copy's leftover is loaded (or failed)

	mu      sync.Mutex
	queue   []int // stored local pages not yet loaded
	closing bool  // load what is queued, then end (restore)
	abort   bool  // end without loading (a failed Receive)
	ended   bool  // the loader is over: queue nothing
	err     error // the failed load's
	busy    time.Duration
	since   time.Time // the load in flight's start; zero: none
	pages   int       // pages loaded
}

// startLoader starts the stop phase's loader with the noted pages (the
// pre-copy's leftover, all stored) first; fail is called once if a load
// fails. The noted bits stay set: stopClaim waits on them.
func (k *localSink) startLoader(fail func(error)) {
	if k == nil || k.loader != nil {
		return
	}
	l := &stopLoader{k: k, fail: fail, wake: make(chan struct{}, 1), done: make(chan struct{}),
		leftover: make(chan struct{})}
	k.loader = l
	first := k.notedList()
	go l.run(first)
}

// stopClaim is the stop phase's claim of device page p (stream.Reader's
// SetClaim): next's verdict, if set, after which a local page that the
// leftover load still reads waits for it (see above). It notes nothing:
// the stop phase's pages reach the loader as they are stored.
func (k *localSink) stopClaim(next func(uint32) bool) func(uint32) bool {
	return func(p uint32) bool {
		if next != nil && !next(p) {
			return false
		}
		if q := p - k.first; p >= k.first && q < k.n && k.arrived[q/64].Load()&(1<<(q%64)) != 0 {
			<-k.loader.leftover
		}
		return true
	}
}

// stored queues the local pages among idx, a batch just stored
// (stream.Reader.SetStored); called from the readers' goroutines.
func (k *localSink) stored(idx []uint32) {
	l := k.loader
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ended {
		return
	}
	for _, p := range idx {
		if q := p - k.first; p >= k.first && q < k.n {
			l.queue = append(l.queue, int(q))
		}
	}
	if len(l.queue) >= loadChunkPages {
		l.signal()
	}
}

// signal wakes the loader; l.mu held.
func (l *stopLoader) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// run is the loader: first, then chunks of the queue, until closed.
func (l *stopLoader) run(first []int) {
	defer close(l.done)
	err := l.load(first)
	close(l.leftover)
	var chunk []int
	for err == nil {
		l.mu.Lock()
		for !l.abort && !l.closing && len(l.queue) < loadChunkPages {
			l.mu.Unlock()
			<-l.wake
			l.mu.Lock()
		}
		if l.abort || len(l.queue) == 0 {
			l.ended = true
			l.mu.Unlock()
			return
		}
		chunk, l.queue = l.queue, chunk[:0]
		l.mu.Unlock()
		err = l.load(chunk)
	}
	l.mu.Lock()
	l.ended, l.err, l.queue = true, err, nil
	l.mu.Unlock()
	l.fail(err)
}

// load loads pages (sorted and made distinct here: LoadLocal wants them
// distinct, and runs of consecutive pages move as one piece) and notes
// them for release.
func (l *stopLoader) load(pages []int) error {
	if len(pages) == 0 {
		return nil
	}
	slices.Sort(pages)
	pages = slices.Compact(pages)
	l.mu.Lock()
	l.since = time.Now()
	l.mu.Unlock()
	err := l.k.load.LoadLocal(pages, l.k.mem)
	l.mu.Lock()
	l.busy += time.Since(l.since)
	l.since = time.Time{}
	if err == nil {
		l.pages += len(pages)
	}
	l.mu.Unlock()
	if err != nil {
		return fmt.Errorf("precopy: copying %d received device-local pages to the GPU during the stop phase: %w", len(pages), err)
	}
	l.k.hold(pages[0], pages[len(pages)-1])
	return nil
}

// finishLoads loads what is left and returns with every local page that
// arrived on the GPU: the noted ones without a loader (no stop Meta), else
// what the loader has queued, waiting for it. It returns the time the
// loader spent loading before the call (a load in flight counts up to
// now) and the pages it had loaded by then.
func (k *localSink) finishLoads() (early time.Duration, earlyPages int, _ error) {
	if k == nil {
		return 0, 0, nil
	}
	l := k.loader
	if l == nil {
		return 0, 0, k.loadNoted()
	}
	l.mu.Lock()
	early, earlyPages = l.busy, l.pages
	if !l.since.IsZero() {
		early += time.Since(l.since)
	}
	l.closing = true
	l.signal()
	l.mu.Unlock()
	<-l.done
	if err := l.failed(); err != nil {
		return early, earlyPages, err
	}
	k.loaded += l.pages
	return early, earlyPages, nil
}

// stopLoader ends the loader, if any, without loading what is queued, and
// waits for it (a load in flight ends first). No reader may store any
// more. It is a no-op once finishLoads returned.
func (k *localSink) stopLoader() {
	if k == nil || k.loader == nil {
		return
	}
	l := k.loader
	l.mu.Lock()
	l.abort = true
	l.signal()
	l.mu.Unlock()
	<-l.done
}

// loadFailed is the loader's error, if a load failed.
func (k *localSink) loadFailed() error {
	if k == nil || k.loader == nil {
		return nil
	}
	return k.loader.failed()
}

func (l *stopLoader) failed() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}
