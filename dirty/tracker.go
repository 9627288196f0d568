package dirty

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/cespare/xxhash/v2"
	"github.com/rs/zerolog"
)

// PageSize is the graphics-memory page size (docs/device-abi.md §1).
const PageSize = 4096

// wordsPerPage is the number of 64-bit words in a page, the most SampleWords
// can be.
const wordsPerPage = PageSize / 8

// DefaultSampleWords is the number of 64-bit words sampled per page when
// Options.SampleWords is 0: 64 bytes of 4096, one cache line's worth of
// loads spread over eight lines.
const DefaultSampleWords = 8

// HashPage returns the xxhash64 of p, normally one page.
func HashPage(p []byte) uint64 { return xxhash.Sum64(p) }

// Options configures a Tracker. The zero value is usable.
type Options struct {
	// Workers is the number of goroutines Record, RecordAll and Scan hash
	// with; 0 means runtime.GOMAXPROCS(0).
	Workers int
	// SampleWords is the number of 64-bit words sampled per page for the
	// pre-filter: 0 means DefaultSampleWords, a negative value disables
	// sampling, at most 512 (the whole page).
	SampleWords int
	// Log receives debug summaries; the zero Logger discards them.
	Log zerolog.Logger
	// Hasher, if set, computes the full page hashes of Scan and ScanFrozen
	// (the pages every cheaper source leaves undecided, in one batch) in
	// place of the Workers; record and background hashing stay on the
	// CPU. It must hash the same memory the Tracker tracks.
	Hasher PageHasher
}

// ErrNoBackground is returned by WaitPasses when no background re-hash is
// running.
var ErrNoBackground = errors.New("dirty: no background re-hash running")

// ErrBackgroundStopped is returned by WaitPasses when the background re-hash
// stopped before completing the passes waited for.
var ErrBackgroundStopped = errors.New("dirty: background re-hash stopped")

// Tracker holds the recorded hashes and dirty marks of one vGPU's graphics
// memory. Its methods are safe for concurrent use (see the package comment).
type Tracker struct {
	mem     []byte
	pages   int
	workers int
	log     zerolog.Logger

	// offsets are the byte offsets of the sampled words in every page,
	// ascending; k = len(offsets).
	offsets []int

	// Recorded state: what the destination holds. samples is flattened,
	// page p's words at [p*k, (p+1)*k).
	hashes   []atomic.Uint64
	samples  []atomic.Uint64
	recorded bitmap

	engine     bitmap // pages the engine wrote (MarkWritten)
	background bitmap // pages the background re-hash found changed
	written    bitmap // pages the write log reported since they were recorded

	wlMu   sync.Mutex // guards the write log fields below
	wlog   WriteLog   // nil: none, or dropped after a failure
	wlLost string     // why an armed log was dropped
	wlBuf  []int      // Written's buffer, reused

	bgMu sync.Mutex
	bg   *bgRun // the running background re-hash, nil if none

	bufs sync.Pool // *[PageSize]byte

	hasher PageHasher // nil: Workers hash
}

// New returns a Tracker over mem, which must be a nonzero multiple of
// PageSize long. No page is recorded yet: until Record or RecordAll, every
// page scans as Unrecorded.
func New(mem []byte, opts Options) (*Tracker, error) {
	if len(mem) == 0 || len(mem)%PageSize != 0 {
		return nil, fmt.Errorf("dirty: memory length %d is not a nonzero multiple of %d", len(mem), PageSize)
	}
	workers := opts.Workers
	switch {
	case workers < 0:
		return nil, fmt.Errorf("dirty: negative worker count %d", workers)
	case workers == 0:
		workers = runtime.GOMAXPROCS(0)
	}
	k := opts.SampleWords
	switch {
	case k > wordsPerPage:
		return nil, fmt.Errorf("dirty: %d sample words exceed the %d words of a page", k, wordsPerPage)
	case k == 0:
		k = DefaultSampleWords
	case k < 0:
		k = 0
	}
	pages := len(mem) / PageSize
	t := &Tracker{
		mem:        mem,
		pages:      pages,
		workers:    workers,
		log:        opts.Log,
		offsets:    sampleOffsets(k),
		hashes:     make([]atomic.Uint64, pages),
		samples:    make([]atomic.Uint64, pages*k),
		recorded:   newBitmap(pages),
		engine:     newBitmap(pages),
		background: newBitmap(pages),
		written:    newBitmap(pages),
		hasher:     opts.Hasher,
	}
	t.bufs.New = func() any { return new([PageSize]byte) }
	return t, nil
}

// sampleOffsets picks k distinct word-aligned byte offsets in a page,
// pseudo-randomly per call, and returns them ascending.
func sampleOffsets(k int) []int {
	words := rand.Perm(wordsPerPage)[:k]
	slices.Sort(words)
	offs := make([]int, k)
	for i, w := range words {
		offs[i] = w * 8
	}
	return offs
}

// Pages returns the number of pages tracked.
func (t *Tracker) Pages() int { return t.pages }

// SampleOffsets returns the byte offsets within a page of the words the
// pre-filter samples, ascending (empty when sampling is disabled).
func (t *Tracker) SampleOffsets() []int { return slices.Clone(t.offsets) }

// page returns page p of mem.
func (t *Tracker) page(p int) []byte {
	return t.mem[p*PageSize : (p+1)*PageSize : (p+1)*PageSize]
}

// getBuf and putBuf lend page buffers to workers.
func (t *Tracker) getBuf() []byte  { return t.bufs.Get().(*[PageSize]byte)[:] }
func (t *Tracker) putBuf(b []byte) { t.bufs.Put((*[PageSize]byte)(b)) }

// checkPages reports the first out-of-range page index in pages.
func (t *Tracker) checkPages(pages []int) error {
	for _, p := range pages {
		if p < 0 || p >= t.pages {
			return fmt.Errorf("dirty: page %d out of range [0, %d)", p, t.pages)
		}
	}
	return nil
}
