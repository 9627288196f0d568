package nvidia

import (
	"fmt"

	"github.com/gmig-dev/gmig/internal/cuda"
)

// GPUHasher is a dirty.PageHasher that hashes on the GPU with
// gmig_xxh64_pages (xxHash64 of each 4096-byte page, bit-identical to the
// tracker's CPU hash): four threads per page, each running one of
// xxHash64's accumulators over its word of every 32-byte stripe, so each
// warp load is whole 32-byte sectors.
//
// Over device memory the kernel reads in place at HBM speed. Over host
// memory (a vGPU's window, page-locked by its back end) it does not read
// across PCIe word by word, which small PCIe reads make slow: the copy
// engine moves whole chunks into device staging buffers (DMA at PCIe
// speed) while the kernel hashes the previous chunk. Only hashes come
// back, through a small pinned buffer. Safe for use by one goroutine at a
// time; it has its own streams, so it runs beside a back end's work.
type GPUHasher struct {
	g     *GPU
	base  cuda.DevPtr // device memory to hash in place (0 for host memory)
	host  []byte      // host memory to stage (nil for device memory)
	pages int
	where string

	stream, copyStream cuda.Stream
	batch              int         // pages per launch
	listB              []byte      // pinned, mapped: page numbers of a launch
	listD              cuda.DevPtr //
	outD               cuda.DevPtr // device: hashes of a launch
	outB               []byte      // pinned: the same, copied back
	stage              [2]cuda.DevPtr
}

// Sizes of the hasher's buffers.
const (
	hashBatch  = 1 << 20 // pages per launch over device memory (4 GiB)
	stageBytes = 64 << 20
	stagePages = stageBytes / pageBytes
)

// NewHasher returns a GPUHasher over pages pages of device memory at base.
func (g *GPU) NewHasher(base cuda.DevPtr, pages int) (*GPUHasher, error) {
	return g.newHasher(base, nil, pages, "device")
}

// NewHostHasher returns a GPUHasher over host memory mem (whole pages),
// which must stay mapped while the hasher is used; it should be
// page-locked (a back end's window is) for the copies to run at DMA speed.
func (g *GPU) NewHostHasher(mem []byte) (*GPUHasher, error) {
	return g.newHasher(0, mem, len(mem)/pageBytes, "host")
}

func (g *GPU) newHasher(base cuda.DevPtr, host []byte, pages int, where string) (*GPUHasher, error) {
	if pages <= 0 {
		return nil, fmt.Errorf("nvidia: hasher over %d pages", pages)
	}
	batch := min(pages, hashBatch)
	if host != nil {
		batch = min(pages, stagePages)
	}
	h := &GPUHasher{g: g, base: base, host: host, pages: pages, batch: batch, where: where}
	err := h.alloc()
	if err != nil {
		h.Close()
		return nil, err
	}
	return h, nil
}

func (h *GPUHasher) alloc() error {
	d := h.g.ops
	var err error
	if h.stream, err = d.NewStream(); err != nil {
		return err
	}
	if h.listB, h.listD, err = d.AllocHostMapped(uint64(4 * h.batch)); err != nil {
		return err
	}
	if h.outB, _, err = d.AllocHostMapped(uint64(8 * h.batch)); err != nil {
		return err
	}
	if h.outD, err = d.Alloc(uint64(8 * h.batch)); err != nil {
		return err
	}
	if h.host == nil {
		return nil
	}
	if h.copyStream, err = d.NewStream(); err != nil {
		return err
	}
	for i := range h.stage {
		if h.stage[i], err = d.Alloc(stageBytes); err != nil {
			return err
		}
	}
	return nil
}

// PageHasher returns a GPU hasher of this back end's host window (the
// aperture, the truth a migration sends).
func (b *NVIDIA) PageHasher() (*GPUHasher, error) { return b.g.NewHostHasher(b.cfg.Window) }

// Name implements dirty.PageHasher.
func (h *GPUHasher) Name() string { return "cuda-" + h.where }

// HashPages implements dirty.PageHasher.
func (h *GPUHasher) HashPages(pages []int, out []uint64) error {
	n := h.pages
	if pages != nil {
		n = len(pages)
	}
	if len(out) < n {
		return fmt.Errorf("nvidia: %d hashes wanted into %d slots", n, len(out))
	}
	for _, p := range pages {
		if p < 0 || p >= h.pages {
			return fmt.Errorf("nvidia: page %d out of range [0, %d)", p, h.pages)
		}
	}
	if h.host != nil {
		return h.hashHost(pages, n, out)
	}
	for done := 0; done < n; {
		k := min(n-done, h.batch)
		var list []int
		first := done
		if pages != nil {
			list, first = pages[done:done+k], 0
		}
		if err := h.launch(uint64(h.base)+uint64(first)*pageBytes, list, 0, k, out[done:done+k]); err != nil {
			return err
		}
		done += k
	}
	return nil
}

// launch hashes k pages at base (the listed ones, less sub, when list is
// not nil) into out and waits.
func (h *GPUHasher) launch(base uint64, list []int, sub, k int, out []uint64) error {
	d := h.g.ops
	var listD cuda.DevPtr
	if list != nil {
		w := u32Words(h.listB)
		for i, p := range list {
			w[i] = uint32(p - sub)
		}
		listD = h.listD
	}
	grid := uint32((4*uint64(k) + blockThreads - 1) / blockThreads)
	if err := d.Launch(h.g.fn.hashPages, grid, blockThreads, h.stream, base, uint64(listD), uint64(k), uint64(h.outD)); err != nil {
		return err
	}
	if err := d.CopyDtoH(h.outB[:8*k], h.outD, h.stream); err != nil {
		return err
	}
	if err := d.Sync(h.stream); err != nil {
		return err
	}
	copy(out, u64Words(h.outB)[:k])
	return nil
}

// hashHost hashes host pages chunk by chunk: the copy engine brings chunk
// i+1 into one staging buffer while the kernel hashes chunk i in the other.
func (h *GPUHasher) hashHost(pages []int, n int, out []uint64) error {
	d := h.g.ops
	// Chunks of at most stagePages consecutive pages of memory; with a list
	// (ascending or not), each chunk takes the list entries that fall in it.
	type chunk struct {
		first, count int   // pages of memory copied
		idx          []int // positions in pages (nil: all of [first, first+count))
	}
	var chunks []chunk
	if pages == nil {
		for p := 0; p < h.pages; p += stagePages {
			chunks = append(chunks, chunk{first: p, count: min(stagePages, h.pages-p)})
		}
	} else {
		byChunk := map[int][]int{}
		var order []int
		for i, p := range pages {
			c := p / stagePages
			if _, ok := byChunk[c]; !ok {
				order = append(order, c)
			}
			byChunk[c] = append(byChunk[c], i)
		}
		for _, c := range order {
			idx := byChunk[c]
			lo, hi := pages[idx[0]], pages[idx[0]]
			for _, i := range idx {
				lo, hi = min(lo, pages[i]), max(hi, pages[i])
			}
			chunks = append(chunks, chunk{first: lo, count: hi - lo + 1, idx: idx})
		}
	}
	copyChunk := func(i int) error {
		c := chunks[i]
		return d.CopyHtoD(h.stage[i%2], h.host[c.first*pageBytes:(c.first+c.count)*pageBytes], h.copyStream)
	}
	if len(chunks) > 0 {
		if err := copyChunk(0); err != nil {
			return err
		}
	}
	list := make([]int, 0, stagePages)
	res := make([]uint64, stagePages)
	for i, c := range chunks {
		if err := d.Sync(h.copyStream); err != nil { // chunk i is in stage[i%2]
			return err
		}
		if i+1 < len(chunks) {
			if err := copyChunk(i + 1); err != nil {
				return err
			}
		}
		if c.idx == nil {
			if err := h.launch(uint64(h.stage[i%2]), nil, 0, c.count, out[c.first:c.first+c.count]); err != nil {
				return err
			}
			continue
		}
		list = list[:0]
		for _, j := range c.idx {
			list = append(list, pages[j])
		}
		if err := h.launch(uint64(h.stage[i%2]), list, c.first, len(list), res[:len(list)]); err != nil {
			return err
		}
		for k, j := range c.idx {
			out[j] = res[k]
		}
	}
	return nil
}

// HashInto hashes every page of device memory into the device array out
// (8 bytes per page) without bringing the hashes back: the throughput of
// the kernel alone.
func (h *GPUHasher) HashInto(out cuda.DevPtr) error {
	if h.host != nil {
		return fmt.Errorf("nvidia: HashInto over host memory")
	}
	grid := uint32((4*uint64(h.pages) + blockThreads - 1) / blockThreads)
	if err := h.g.ops.Launch(h.g.fn.hashPages, grid, blockThreads, h.stream, uint64(h.base), 0, uint64(h.pages), uint64(out)); err != nil {
		return err
	}
	return h.g.ops.Sync(h.stream)
}

// Close frees the hasher's buffers and streams.
func (h *GPUHasher) Close() error {
	d := h.g.ops
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	for _, b := range []*[]byte{&h.listB, &h.outB} {
		if *b != nil {
			keep(d.FreeHost(*b))
			*b = nil
		}
	}
	for _, p := range []*cuda.DevPtr{&h.outD, &h.stage[0], &h.stage[1]} {
		if *p != 0 {
			keep(d.Free(*p))
			*p = 0
		}
	}
	for _, s := range []*cuda.Stream{&h.stream, &h.copyStream} {
		if *s != 0 {
			keep(d.DestroyStream(*s))
			*s = 0
		}
	}
	return first
}
