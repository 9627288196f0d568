package precopy

import (
	"fmt"
	"math/bits"
	"sync/atomic"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/vgpu"
)

// The destination's half of device-local memory on the NVIDIA back end
// (local.go): local pages arrive, as every page does, into the vGPU's
// device memory on the host (vgpu.DeviceMemory: the pool's local range is
// the receive buffer there), but the vGPU's local memory lives on the GPU.
// During the pre-copy a localSink notes which local pages arrived (the
// stream reader's claim hook) and copies them to the GPU whenever
// flushPages have gathered (the VM still runs at the source). At the stop
// Meta the rest goes on a loader (local_load.go): the pre-copy's last
// noted pages first, then each stop-phase page once a stream's reader has
// stored it, in chunks, while later pages still arrive; restore waits for
// the loader to load what is left, so the downtime carries only the tail
// of the stop phase's pages. Once on the GPU their host pages go back to
// the kernel: the pre-copy's lazily (vgpu.FreeLocal, MADV_FREE: the kernel
// takes them when it needs memory, and until then a page written again
// keeps its place), and after the verdict, out of the downtime, every
// page at once (vgpu.DiscardLocal over the whole range). A page sent again
// (the stop phase re-sends those that changed) therefore lands, unless
// the kernel took it meanwhile, in memory that is there: no page fault
// and no fresh zero page per page in the downtime (16 GiB at 1 % on the
// H200: 42679 faults and 174 ms of system CPU on the destination's
// stop phase when the pre-copy gave its pages back at once). What the
// buffer holds for good is nothing; what it holds reclaimable during a
// migration is what arrived, as stop-and-copy holds it until the verdict.

// flushPages is how many arrived local pages the pre-copy gathers before
// copying them to the GPU: 64 MiB, a few milliseconds of PCIe (a variable
// so that tests can flush often).
var flushPages int64 = 16 << 10

// localLoader copies the listed pages of local memory's host image
// (page p at byte p*4096) to a back end's device-local memory
// (nvidia.NVIDIA.LoadLocal: gathered into a staging buffer, one PCIe
// copy and one scatter launch per 64 MiB, not a copy per run).
type localLoader interface {
	LoadLocal(pages []int, mem []byte) error
}

// wrapLoader, when set, wraps each Receive's localLoader: tests count
// loads and inject failures through it.
var wrapLoader func(localLoader) localLoader

// localDiscarder gives host pages of the receive buffer back to the
// kernel: at once (vgpu.VGPU.DiscardLocal: local pages [first, first+n)
// read as zeros afterwards and hold no memory), or when it needs memory
// (FreeLocal: until then they keep their bytes, and a write keeps them).
type localDiscarder interface {
	DiscardLocal(first, n int) error
	FreeLocal(first, n int) error
}

// localSink is a Receive's device-local pages on their way to the GPU;
// nil for a vGPU whose local memory is the host range itself.
type localSink struct {
	load    localLoader
	discard localDiscarder // nil: the host pages stay (tests of loading alone)
	log     zerolog.Logger
	first   uint32 // device page number of local page 0
	n       uint32 // local pages
	mem     []byte // the host receive buffer: vgpu.LocalMemory
	arrived []atomic.Uint64
	count   atomic.Int64 // bits set in arrived
	loaded  int          // pages copied to the GPU, for the log
	list    []int        // the last noted pages' list
	lo, hi  int          // the span of pages loaded and not yet released, if held
	held    bool         // lo, hi hold a span
	freeLo  int          // the span of pages freed lazily (FreeLocal) since the last release, if freed
	freeHi  int          //
	freed   bool         //
	loader  *stopLoader  // the stop phase's (local_load.go); nil before the stop Meta
}

// newLocalSink returns the sink of v, or nil when its local memory needs
// none (none at all, or the software back end's).
func newLocalSink(v *vgpu.VGPU, log zerolog.Logger) *localSink {
	g := v.GPU()
	if g == nil || g.LocalSize() == 0 {
		return nil
	}
	n := uint32(g.LocalSize() / dirty.PageSize)
	var load localLoader = g
	if wrapLoader != nil {
		load = wrapLoader(load)
	}
	return &localSink{load: load, discard: v, log: log, first: uint32(len(v.Memory()) / dirty.PageSize), n: n,
		mem: v.LocalMemory(), arrived: make([]atomic.Uint64, (n+63)/64)}
}

// claim notes device page p if it is local and accepts it (a stream
// reader's claim, stream.Reader.SetClaim); next, if set, is the claim it
// wraps (the stop phase's shared claim over several streams).
func (k *localSink) claim(next func(uint32) bool) func(uint32) bool {
	return func(p uint32) bool {
		if next != nil && !next(p) {
			return false
		}
		if q := p - k.first; p >= k.first && q < k.n {
			bit := uint64(1) << (q % 64)
			if k.arrived[q/64].Or(bit)&bit == 0 {
				k.count.Add(1)
			}
		}
		return true
	}
}

// due reports whether the pre-copy has gathered enough pages to flush.
func (k *localSink) due() bool { return k != nil && k.count.Load() >= flushPages }

// flush loads the noted pages to the GPU and frees their host pages
// lazily (the pre-copy's flush: free). The pages must be stored (the
// readers waited for) and no reader may store meanwhile.
func (k *localSink) flush() error {
	if err := k.loadNoted(); err != nil {
		return err
	}
	k.free()
	return nil
}

// loadNoted copies every noted page from the receive buffer to the GPU, in
// one call for the back end to batch, and forgets them; they stay held
// for release. The pages must be stored (the readers waited for) and no
// reader may store meanwhile.
func (k *localSink) loadNoted() error {
	if k == nil || k.count.Load() == 0 {
		return nil
	}
	k.list = k.list[:0]
	for w := range k.arrived {
		word := k.arrived[w].Swap(0)
		k.count.Add(-int64(bits.OnesCount64(word)))
		for ; word != 0; word &= word - 1 {
			k.list = append(k.list, w*64+bits.TrailingZeros64(word))
		}
	}
	if err := k.load.LoadLocal(k.list, k.mem); err != nil {
		return fmt.Errorf("precopy: copying %d received device-local pages to the GPU: %w", len(k.list), err)
	}
	k.loaded += len(k.list)
	k.hold(k.list[0], k.list[len(k.list)-1])
	return nil
}

// notedList returns the noted pages, ascending, and leaves them noted
// (the stop phase's loader loads them first; stopClaim reads the bits).
func (k *localSink) notedList() []int {
	var list []int
	for w := range k.arrived {
		for word := k.arrived[w].Load(); word != 0; word &= word - 1 {
			list = append(list, w*64+bits.TrailingZeros64(word))
		}
	}
	return list
}

// hold widens the span of loaded pages that release gives back to
// [lo, hi].
func (k *localSink) hold(lo, hi int) {
	if !k.held {
		k.lo, k.hi, k.held = lo, hi, true
		return
	}
	k.lo, k.hi = min(k.lo, lo), max(k.hi, hi)
}

// release gives the host pages loaded since the last release back to the
// kernel, in one call over the span from the first page loaded to the
// last: every page between that was not loaded since is on the GPU and
// given back already, or never arrived, so the span frees exactly what a
// call per run of pages would, while walking the gaps costs next to
// nothing (this machine, Linux 6.18: MADV_DONTNEED over 16 GiB of empty
// page tables 71 µs, against 1.9 µs for each call). Freeing what was
// loaded costs about 4 ms per 64 MiB (the same machine). No reader may
// store until it returns, nor the loader load: a page sent again must
// land after its old copy is gone. A failure leaves the pages held and is
// only logged; the migration does not depend on it.
//
// The span covers the pages freed lazily since the last release (free) as
// well: they go back at once now, reclaimed or not.
func (k *localSink) release() {
	if k == nil || k.discard == nil || (!k.held && !k.freed) {
		return
	}
	lo, hi := k.lo, k.hi
	switch {
	case !k.held:
		lo, hi = k.freeLo, k.freeHi
	case k.freed:
		lo, hi = min(lo, k.freeLo), max(hi, k.freeHi)
	}
	if err := k.discard.DiscardLocal(lo, hi-lo+1); err != nil {
		k.log.Warn().Err(err).Int("first", lo).Int("pages", hi-lo+1).Msg("giving received device-local pages back to the kernel; their host memory stays held")
	}
	k.held, k.freed = false, false
}

// free lets the kernel take the host pages loaded since the last release
// or free whenever it needs memory (FreeLocal, one call over their span,
// as release): a page that arrives again before that lands with no page
// fault. release gives them back at once later. The ordering is
// release's: no reader stores, nor the loader loads, until it returns.
// A failure is only logged.
func (k *localSink) free() {
	if k == nil || k.discard == nil || !k.held {
		return
	}
	if err := k.discard.FreeLocal(k.lo, k.hi-k.lo+1); err != nil {
		k.log.Warn().Err(err).Int("first", k.lo).Int("pages", k.hi-k.lo+1).Msg("freeing received device-local pages lazily; their host memory stays held until the migration ends")
	}
	if !k.freed {
		k.freeLo, k.freeHi, k.freed = k.lo, k.hi, true
	} else {
		k.freeLo, k.freeHi = min(k.freeLo, k.lo), max(k.freeHi, k.hi)
	}
	k.held = false
}

// loadedPages is how many local pages went to the GPU (0 without a sink).
func (k *localSink) loadedPages() int {
	if k == nil {
		return 0
	}
	return k.loaded
}
