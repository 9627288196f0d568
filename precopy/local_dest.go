package precopy

import (
	"fmt"
	"math/bits"
	"sync/atomic"

	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/vgpu"
)

// The destination's half of device-local memory on the NVIDIA back end
// (local.go): local pages arrive, as every page does, into the vGPU's
// device memory on the host (vgpu.DeviceMemory: the pool's local range is
// the receive buffer there), but the vGPU's local memory lives on the GPU.
// A localSink notes which local pages arrived (the stream readers' claim
// hook) and copies them to the GPU: during the pre-copy whenever
// flushPages have gathered (the VM still runs at the source), and what is
// left — the stop phase's pages — before the vGPU is restored, so the
// downtime carries only those.

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

// localSink is a Receive's device-local pages on their way to the GPU;
// nil for a vGPU whose local memory is the host range itself.
type localSink struct {
	load    localLoader
	first   uint32 // device page number of local page 0
	n       uint32 // local pages
	mem     []byte // the host receive buffer: vgpu.LocalMemory
	arrived []atomic.Uint64
	count   atomic.Int64 // bits set in arrived
	loaded  int          // pages copied to the GPU, for the log
	list    []int        // flush's pages, kept for the next flush
}

// newLocalSink returns the sink of v, or nil when its local memory needs
// none (none at all, or the software back end's).
func newLocalSink(v *vgpu.VGPU) *localSink {
	g := v.GPU()
	if g == nil || g.LocalSize() == 0 {
		return nil
	}
	n := uint32(g.LocalSize() / dirty.PageSize)
	return &localSink{load: g, first: uint32(len(v.Memory()) / dirty.PageSize), n: n,
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

// flush copies every noted page from the receive buffer to the GPU, in
// one call for the back end to batch, and forgets them. The pages must be
// stored (the readers waited for) and no reader may store meanwhile.
func (k *localSink) flush() error {
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
	return nil
}
