package engine

import (
	"fmt"

	"github.com/gmig-dev/gmig/internal/cuda"
)

// GPUHasher is a dirty.PageHasher that hashes on the GPU with
// gmig_xxh64_pages (xxHash64 of each 4096-byte page, bit-identical to the
// tracker's CPU hash): four threads per page, each running one of
// xxHash64's accumulators over its word of every 32-byte stripe, so each
// warp load is whole 32-byte sectors. It reads memory at a device address:
// device memory (HBM speed) or host memory registered with the GPU (PCIe
// speed). Page lists go to the device and hashes come back through small
// pinned buffers; the pages themselves never cross PCIe for it unless they
// are host memory. Safe for use by one goroutine at a time; it has its own
// stream, so it runs beside a back end's work.
type GPUHasher struct {
	g      *GPU
	base   cuda.DevPtr
	pages  int
	stream cuda.Stream
	batch  int // pages per launch
	list   []uint32
	listB  []byte
	listD  cuda.DevPtr
	out    []uint64
	outB   []byte
	outD   cuda.DevPtr
	where  string
}

// hashBatch is the most pages one launch hashes (4 GiB of memory), which
// bounds the pinned list and result buffers (20 MiB).
const hashBatch = 1 << 20

// NewHasher returns a GPUHasher over pages pages at device address base;
// where names the memory for reports ("device", "host").
func (g *GPU) NewHasher(base cuda.DevPtr, pages int, where string) (*GPUHasher, error) {
	if pages <= 0 {
		return nil, fmt.Errorf("engine: hasher over %d pages", pages)
	}
	h := &GPUHasher{g: g, base: base, pages: pages, batch: min(pages, hashBatch), where: where}
	var err error
	if h.stream, err = g.ops.NewStream(); err != nil {
		return nil, err
	}
	if h.listB, h.listD, err = g.ops.AllocHostMapped(uint64(4 * h.batch)); err == nil {
		h.outB, h.outD, err = g.ops.AllocHostMapped(uint64(8 * h.batch))
	}
	if err != nil {
		h.Close()
		return nil, err
	}
	h.list, h.out = u32Words(h.listB), u64Words(h.outB)
	return h, nil
}

// PageHasher returns a hasher of this back end's host window (the
// aperture, the truth a migration sends), read by the GPU over PCIe.
func (b *NVIDIA) PageHasher() (*GPUHasher, error) {
	return b.g.NewHasher(b.host, int(b.size/pageBytes), "host")
}

// Name implements dirty.PageHasher.
func (h *GPUHasher) Name() string { return "cuda-" + h.where }

// HashPages implements dirty.PageHasher.
func (h *GPUHasher) HashPages(pages []int, out []uint64) error {
	n := h.pages
	if pages != nil {
		n = len(pages)
	}
	if len(out) < n {
		return fmt.Errorf("engine: %d hashes wanted into %d slots", n, len(out))
	}
	for done := 0; done < n; {
		k := min(n-done, h.batch)
		var list cuda.DevPtr
		first := uint64(done)
		if pages != nil {
			for i, p := range pages[done : done+k] {
				if p < 0 || p >= h.pages {
					return fmt.Errorf("engine: page %d out of range [0, %d)", p, h.pages)
				}
				h.list[i] = uint32(p)
			}
			list, first = h.listD, 0
		}
		base := uint64(h.base) + first*pageBytes
		grid := uint32((4*uint64(k) + blockThreads - 1) / blockThreads)
		if err := h.g.ops.Launch(h.g.fn.hashPages, grid, blockThreads, h.stream, base, uint64(list), uint64(k), uint64(h.outD)); err != nil {
			return err
		}
		if err := h.g.ops.Sync(h.stream); err != nil {
			return err
		}
		copy(out[done:done+k], h.out[:k])
		done += k
	}
	return nil
}

// HashInto hashes every page into the device array out (8 bytes per
// page) without bringing the hashes back: the throughput of the kernel
// alone (MeasureGPUHash).
func (h *GPUHasher) HashInto(out cuda.DevPtr) error {
	grid := uint32((4*uint64(h.pages) + blockThreads - 1) / blockThreads)
	if err := h.g.ops.Launch(h.g.fn.hashPages, grid, blockThreads, h.stream, uint64(h.base), 0, uint64(h.pages), uint64(out)); err != nil {
		return err
	}
	return h.g.ops.Sync(h.stream)
}

// Close frees the hasher's buffers and stream.
func (h *GPUHasher) Close() error {
	var first error
	for _, b := range [][]byte{h.listB, h.outB} {
		if b != nil {
			if err := h.g.ops.FreeHost(b); err != nil && first == nil {
				first = err
			}
		}
	}
	h.listB, h.outB, h.list, h.out = nil, nil, nil, nil
	if h.stream != 0 {
		if err := h.g.ops.DestroyStream(h.stream); err != nil && first == nil {
			first = err
		}
		h.stream = 0
	}
	return first
}
