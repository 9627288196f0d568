package nvidia

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"
	"sync"

	"github.com/gmig-dev/gmig/internal/cuda"
	"github.com/gmig-dev/gmig/internal/parcopy"
)

// Migration of device-local memory on the NVIDIA back end
// (docs/migration-stream.md, "Device-local pages"). Local memory has no
// host copy and guest kernels write it where the engine cannot see
// (LAUNCH_GRID), so engine marks cannot say which pages changed: a
// LocalTracker finds them by hashing on the GPU (gmig_xxh64_pages, the
// GPUHasher's kernel). The pre-copy snapshots every page once, in chunks,
// while the VM runs, and records the hash of exactly the bytes it sends;
// the stop phase hashes local memory again in place and compares on the
// GPU (gmig_diff_hashes): only pages whose hash changed cross PCIe again.
//
// Concurrency: the pre-copy runs on the migration's goroutine while the
// engine goroutine keeps issuing commands. The tracker never uses the back
// end's stream, table or scratch: it has its own stream, piece table and
// device staging buffer, so no lock is taken against the engine. A chunk
// is first copied on the device into staging (a snapshot), then hashed and
// copied to the host from there: what is hashed is what is sent, whatever
// a concurrent command does to local memory meanwhile (a page torn by it
// hashes as sent and differs at the stop unless it ends up exactly as
// sent).

// LocalMethod names how the tracker finds changed pages, for reports.
const LocalMethod = "gpu-hash"

// LocalTracker reads a back end's device-local memory for a migration and
// finds the pages that changed since they were read. Safe for use by one
// goroutine at a time, beside the engine's use of the back end — but for
// Changed and ChangedIn, which may run on a second goroutine beside Read
// and ReadHashed (a stop phase reads the first range's changed pages
// while the GPU hashes the next): they have a stream of their own and
// touch nothing a read uses but the per-page hashes of finished ranges.
// The back end must not be closed or re-placed (PlaceLocal) while it is
// in use.
type LocalTracker struct {
	b     *NVIDIA
	pages int

	cmp      cuda.Stream // Changed's and ChangedIn's
	mu       sync.Mutex  // fresh, between the comparing goroutine and a reading one
	stream   cuda.Stream
	stage    cuda.DevPtr // stageBytes of device staging
	host     []byte      // stageBytes of pinned host staging: staging's PCIe copies run at DMA speed
	table    []nvPiece   // pinned, device-mapped piece table
	tableRaw []byte
	tableDev cuda.DevPtr
	sums     cuda.DevPtr // per page: the hash of the bytes sent
	now      cuda.DevPtr // per page: the hash at the stop
	list     *diffList   // the pages whose hashes differ
	unsent   []uint64    // a bit per page never snapshotted (no hash in sums)
	changed  []uint64    // Changed's bitmap, reused
	fresh    []uint64    // a bit per page whose hash in now the last Changed or ChangedIn took, no Snapshot since
}

// NewLocalTracker returns a tracker over b's device-local memory (which it
// must have). Close it when the migration ends.
func (b *NVIDIA) NewLocalTracker() (LocalReader, error) {
	if b.local == nil {
		return nil, fmt.Errorf("nvidia: local tracker on a back end without device-local memory")
	}
	t := &LocalTracker{b: b, pages: int(b.cfg.LocalSize / pageBytes)}
	words := (t.pages + 63) / 64
	t.unsent, t.changed, t.fresh = make([]uint64, words), make([]uint64, words), make([]uint64, words)
	for p := range t.pages {
		t.unsent[p/64] |= 1 << (p % 64)
	}
	if err := t.alloc(); err != nil {
		_ = t.Close()
		return nil, fmt.Errorf("nvidia: local tracker: %w", err)
	}
	return t, nil
}

func (t *LocalTracker) alloc() error {
	d, n := t.b.dev, uint64(t.pages)
	var err error
	if t.stream, err = d.NewStream(); err != nil {
		return err
	}
	if t.cmp, err = d.NewStream(); err != nil {
		return err
	}
	if t.stage, err = d.Alloc(stageBytes); err != nil {
		return err
	}
	if t.host, _, err = d.AllocHostMapped(stageBytes); err != nil {
		return err
	}
	if t.tableRaw, t.tableDev, err = d.AllocHostMapped(tablePieces * 24); err != nil {
		return err
	}
	t.table = pieceTable(t.tableRaw)
	if t.sums, err = d.Alloc(8 * n); err != nil {
		return err
	}
	if t.now, err = d.Alloc(8 * n); err != nil {
		return err
	}
	t.list, err = newDiffList(d, n)
	return err
}

// Pages is the number of device-local pages.
func (t *LocalTracker) Pages() int { return t.pages }

// Snapshot copies local pages [first, first+n) into buf (4096 bytes each)
// and records their hashes: the hashes of exactly those bytes.
func (t *LocalTracker) Snapshot(first, n int, buf []byte) error {
	if first < 0 || n < 0 || first+n > t.pages || len(buf) < n*pageBytes {
		return fmt.Errorf("nvidia: local snapshot of pages [%d, +%d) of %d into %d bytes", first, n, t.pages, len(buf))
	}
	base := t.b.DeviceAddrBase()
	for done := 0; done < n; {
		k := min(n-done, stagePages)
		p := first + done
		ps := appendPiece(nil, base+uint64(p)*pageBytes, uint64(t.stage), uint64(k)*pageBytes)
		if err := t.copyPieces(ps); err != nil {
			return err
		}
		if err := t.hash(t.stream, uint64(t.stage), uint64(k), uint64(t.sums)+8*uint64(p)); err != nil {
			return err
		}
		if err := t.fetch(buf[done*pageBytes : (done+k)*pageBytes]); err != nil {
			return err
		}
		t.mu.Lock()
		for i := p; i < p+k; i++ {
			t.unsent[i/64] &^= 1 << (i % 64)
			t.fresh[i/64] &^= 1 << (i % 64)
		}
		t.mu.Unlock()
		done += k
	}
	return nil
}

// Changed hashes all local memory in place and returns, ascending, the
// pages whose hash differs from the one Snapshot recorded, and every page
// never snapshotted. Call it with the engine quiesced. The comparison runs
// on the device (diffList); the pages come back through a bitmap, which
// orders them without a sort (16 GiB of local memory: 64 Ki words).
func (t *LocalTracker) Changed() ([]int, error) {
	n := uint64(t.pages)
	if err := t.hash(t.cmp, t.b.DeviceAddrBase(), n, uint64(t.now)); err != nil {
		return nil, err
	}
	diff, err := t.list.run(t.b.g, t.b.dev, t.cmp, t.sums, t.now, n)
	if err != nil {
		return nil, err
	}
	t.markFresh(0, t.pages)
	copy(t.changed, t.unsent) // a page never sent has no hash to compare: it goes
	for _, p := range diff {
		t.changed[p/64] |= 1 << (p % 64)
	}
	count := 0
	for _, w := range t.changed {
		count += bits.OnesCount64(w)
	}
	out := make([]int, 0, count)
	for i, w := range t.changed {
		for ; w != 0; w &= w - 1 {
			out = append(out, i*64+bits.TrailingZeros64(w))
		}
	}
	return out, nil
}

// ChangedIn is Changed over pages [first, first+n) alone: it hashes them
// in place and returns, ascending, those whose hash differs from the one
// Snapshot recorded and those never snapshotted. A stop phase calls it
// range by range so that the first changed pages can be read and sent
// while the GPU still hashes the rest.
func (t *LocalTracker) ChangedIn(first, n int) ([]int, error) {
	if first < 0 || n < 0 || first+n > t.pages {
		return nil, fmt.Errorf("nvidia: local pages [%d, +%d) of %d", first, n, t.pages)
	}
	if n == 0 {
		return nil, nil
	}
	off := 8 * uint64(first)
	if err := t.hash(t.cmp, t.b.DeviceAddrBase()+uint64(first)*pageBytes, uint64(n), uint64(t.now)+off); err != nil {
		return nil, err
	}
	diff, err := t.list.run(t.b.g, t.b.dev, t.cmp, t.sums+cuda.DevPtr(off), t.now+cuda.DevPtr(off), uint64(n))
	if err != nil {
		return nil, err
	}
	t.markFresh(first, n)
	out := make([]int, 0, len(diff))
	for _, p := range diff {
		if q := first + int(p); t.unsent[q/64]&(1<<(q%64)) == 0 {
			out = append(out, q) // an unsent page comes below, once
		}
	}
	for w := first / 64; w <= (first+n-1)/64; w++ { // a word at a time: after a pre-copy, all zero
		for word := t.unsent[w]; word != 0; word &= word - 1 {
			if q := w*64 + bits.TrailingZeros64(word); q >= first && q < first+n {
				out = append(out, q)
			}
		}
	}
	slices.Sort(out)
	return out, nil
}

// Read copies the listed local pages, in order, into buf (4096 bytes
// each): per staging chunk, one gmig_copy_pieces launch gathers them on
// the device into staging (runs of consecutive pages as one piece), one
// copy brings the chunk across PCIe into pinned host staging, and the CPU
// copies it into buf.
func (t *LocalTracker) Read(pages []int, buf []byte) error {
	if len(buf) < len(pages)*pageBytes {
		return fmt.Errorf("nvidia: %d local pages into %d bytes", len(pages), len(buf))
	}
	for _, p := range pages {
		if p < 0 || p >= t.pages {
			return fmt.Errorf("nvidia: local page %d out of range [0, %d)", p, t.pages)
		}
	}
	base := t.b.DeviceAddrBase()
	for done := 0; done < len(pages); {
		k := min(len(pages)-done, stagePages)
		var ps []nvPiece
		for i, p := range pages[done : done+k] {
			ps = appendPiece(ps, base+uint64(p)*pageBytes, uint64(t.stage)+uint64(i)*pageBytes, pageBytes)
		}
		if err := t.copyPieces(ps); err != nil {
			return err
		}
		if err := t.fetch(buf[done*pageBytes : (done+k)*pageBytes]); err != nil {
			return err
		}
		done += k
	}
	return nil
}

// markFresh records that now holds the hashes of pages [first, first+n)
// as they are.
func (t *LocalTracker) markFresh(first, n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for p := first; p < first+n; {
		if p%64 == 0 && p+64 <= first+n {
			t.fresh[p/64] = ^uint64(0)
			p += 64
			continue
		}
		t.fresh[p/64] |= 1 << (p % 64)
		p++
	}
}

// checkFresh checks that every page is in range and has its hash of now
// (markFresh).
func (t *LocalTracker) checkFresh(pages []int) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, p := range pages {
		if p < 0 || p >= t.pages {
			return fmt.Errorf("nvidia: local page %d out of range [0, %d)", p, t.pages)
		}
		if t.fresh[p/64]&(1<<(p%64)) == 0 {
			return fmt.Errorf("nvidia: local page %d has no hash of the stop (no Changed or ChangedIn over it since its snapshot)", p)
		}
	}
	return nil
}

// readHashedPages is how many pages ReadHashed gathers per staging chunk:
// the pages and then their hashes fit in staging.
const readHashedPages = stageBytes / (pageBytes + 8)

// ReadHashed is Read that also gives each page's xxhash64 — the one the
// last Changed or ChangedIn over it computed on the GPU, so the caller
// need not hash the pages again (a stream's writer sends them with these
// hashes): sums[i] is the hash of page pages[i]. Each page must have been
// hashed by Changed or ChangedIn since its last Snapshot, and not changed
// since (the engine quiesced, as a stop phase has it); else ReadHashed
// refuses. Per staging chunk the one gather launch also gathers the
// pages' hashes behind them, and a second, small copy brings those back.
// It reports true: a LocalTracker always gives the hashes.
func (t *LocalTracker) ReadHashed(pages []int, buf []byte, sums []uint64) (bool, error) {
	if len(buf) < len(pages)*pageBytes || len(sums) < len(pages) {
		return false, fmt.Errorf("nvidia: %d local pages into %d bytes and %d hashes", len(pages), len(buf), len(sums))
	}
	if err := t.checkFresh(pages); err != nil {
		return false, err
	}
	base := t.b.DeviceAddrBase()
	for done := 0; done < len(pages); {
		k := min(len(pages)-done, readHashedPages)
		chunk := pages[done : done+k]
		var ps []nvPiece
		for i, p := range chunk {
			ps = appendPiece(ps, base+uint64(p)*pageBytes, uint64(t.stage)+uint64(i)*pageBytes, pageBytes)
		}
		at := uint64(t.stage) + uint64(k)*pageBytes
		for i, p := range chunk {
			ps = appendPiece(ps, uint64(t.now)+8*uint64(p), at+8*uint64(i), 8)
		}
		if err := t.copyPieces(ps); err != nil {
			return false, err
		}
		if err := t.fetchFrom(buf[done*pageBytes:(done+k)*pageBytes], t.stage); err != nil {
			return false, err
		}
		h := t.host[:8*k]
		if err := t.b.dev.CopyDtoH(h, cuda.DevPtr(at), t.stream); err != nil {
			return false, err
		}
		if err := t.b.dev.Sync(t.stream); err != nil {
			return false, err
		}
		for i := range k {
			sums[done+i] = binary.LittleEndian.Uint64(h[8*i:])
		}
		done += k
	}
	return true, nil
}

// copyPieces runs gmig_copy_pieces over ps on the tracker's stream.
func (t *LocalTracker) copyPieces(ps []nvPiece) error {
	for len(ps) > 0 {
		n := min(len(ps), len(t.table))
		copy(t.table, ps[:n])
		if err := t.b.dev.Launch(t.b.g.fn.copyPieces, uint32(min(n, pieceBlocks)), blockThreads, t.stream,
			uint64(t.tableDev), uint64(n)); err != nil {
			return err
		}
		if err := t.b.dev.Sync(t.stream); err != nil {
			return err
		}
		ps = ps[n:]
	}
	return nil
}

// hash runs gmig_xxh64_pages over n pages at base into out on stream s
// and waits.
func (t *LocalTracker) hash(s cuda.Stream, base, n, out uint64) error {
	grid := uint32((4*n + blockThreads - 1) / blockThreads)
	if err := t.b.dev.Launch(t.b.g.fn.hashPages, grid, blockThreads, s, base, 0, n, out); err != nil {
		return err
	}
	return t.b.dev.Sync(s)
}

// fetch copies the start of staging into dst (at most stageBytes)
// through pinned host staging and waits: a copy into pageable memory (a
// Go slice) runs through the driver's small bounce buffers, far below
// PCIe speed.
//
// Into the registered bulk buffer (NVIDIAConfig.Bulk) the copy lands
// straight in dst.
func (t *LocalTracker) fetch(dst []byte) error { return t.fetchFrom(dst, t.stage) }

// fetchFrom is fetch from device memory at src (in staging).
func (t *LocalTracker) fetchFrom(dst []byte, src cuda.DevPtr) error {
	if t.b.inBulk(dst) {
		if err := t.b.dev.CopyDtoH(dst, src, t.stream); err != nil {
			return err
		}
		return t.b.dev.Sync(t.stream)
	}
	h := t.host[:len(dst)]
	if err := t.b.dev.CopyDtoH(h, src, t.stream); err != nil {
		return err
	}
	if err := t.b.dev.Sync(t.stream); err != nil {
		return err
	}
	parcopy.Copy(dst, h)
	return nil
}

// Close frees the tracker's buffers and stream.
func (t *LocalTracker) Close() error {
	d := t.b.dev
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	keep(t.list.free(d))
	t.list = nil
	for _, b := range []*[]byte{&t.host, &t.tableRaw} {
		if *b != nil {
			keep(d.FreeHost(*b))
			*b = nil
		}
	}
	t.table = nil
	for _, p := range []*cuda.DevPtr{&t.stage, &t.sums, &t.now} {
		if *p != 0 {
			keep(d.Free(*p))
			*p = 0
		}
	}
	for _, st := range []*cuda.Stream{&t.stream, &t.cmp} {
		if *st != 0 {
			keep(d.DestroyStream(*st))
			*st = 0
		}
	}
	return first
}

// LoadLocal copies the listed local pages (distinct) of mem (local memory's host
// image: page p at byte p*4096, a migration's receive buffer) to
// device-local memory and waits. Per staging chunk the CPU gathers them,
// on several cores (parcopy), into pinned host staging (allocated at the
// first load, kept until Close: a pageable source would cross PCIe
// through the driver's small bounce buffers, at a fraction of the copy
// engine's rate), one copy brings it across PCIe into the device scratch,
// and one gmig_copy_pieces launch scatters it (runs of consecutive pages
// as one piece): a copy per run would cost a driver call and a PCIe
// round trip per scattered page. Call it with the engine quiesced (a
// destination's is).
func (b *NVIDIA) LoadLocal(pages []int, mem []byte) error {
	if uint64(len(mem)) < b.cfg.LocalSize {
		return fmt.Errorf("nvidia: loading local pages from %d bytes into %d of device-local memory", len(mem), b.cfg.LocalSize)
	}
	return b.loadLocal(pages, func(_, p int) []byte { return mem[p*pageBytes : (p+1)*pageBytes] }, nil)
}

// LoadLocalPacked is LoadLocal with the pages' bytes packed in list
// order, page pages[i] at packed[i*4096:] (what a GPU worker receives:
// the listed pages alone). From the registered bulk buffer
// (NVIDIAConfig.Bulk) each chunk crosses PCIe straight from packed.
func (b *NVIDIA) LoadLocalPacked(pages []int, packed []byte) error {
	if len(packed) < len(pages)*pageBytes {
		return fmt.Errorf("nvidia: loading %d local pages from %d bytes", len(pages), len(packed))
	}
	packed = packed[:len(pages)*pageBytes]
	var direct []byte
	if b.inBulk(packed) {
		direct = packed
	}
	return b.loadLocal(pages, func(i, _ int) []byte { return packed[i*pageBytes : (i+1)*pageBytes] }, direct)
}

// loadLocal is LoadLocal with page(i, p), the bytes of pages[i] = p; or,
// when direct is set, the pages packed there in list order, in pinned
// memory, copied to the device from where they are.
func (b *NVIDIA) loadLocal(pages []int, page func(i, p int) []byte, direct []byte) error {
	n := b.cfg.LocalSize / pageBytes
	if b.local == nil {
		return fmt.Errorf("nvidia: loading local pages into a back end without device-local memory")
	}
	for _, p := range pages {
		if p < 0 || uint64(p) >= n {
			return fmt.Errorf("nvidia: loading local page %d out of range [0, %d)", p, n)
		}
	}
	if len(pages) == 0 {
		return nil
	}
	if err := b.ensureScratch(uint64(min(len(pages), stagePages)) * pageBytes); err != nil {
		return fmt.Errorf("nvidia: loading device-local memory: %w", err)
	}
	if direct == nil && b.loadStage == nil {
		var err error
		if b.loadStage, _, err = b.dev.AllocHostMapped(stageBytes); err != nil {
			return fmt.Errorf("nvidia: loading device-local memory: pinned staging: %w", err)
		}
	}
	stage := b.loadStage
	base := b.DeviceAddrBase()
	for done := 0; done < len(pages); {
		k := min(len(pages)-done, stagePages)
		var ps []nvPiece
		var src []byte
		if direct != nil {
			src = direct[done*pageBytes : (done+k)*pageBytes]
		} else {
			src = stage[:k*pageBytes]
		}
		chunk := pages[done : done+k]
		if direct == nil {
			parcopy.Pages(k, pageBytes, func(i int) ([]byte, []byte) {
				return stage[i*pageBytes : (i+1)*pageBytes], page(done+i, chunk[i])
			})
		}
		for i, p := range chunk {
			ps = appendPiece(ps, uint64(b.scratch)+uint64(i)*pageBytes, base+uint64(p)*pageBytes, pageBytes)
		}
		if err := b.dev.CopyHtoD(b.scratch, src, b.stream); err != nil {
			return fmt.Errorf("nvidia: loading device-local memory: %w", err)
		}
		if err := b.runPieces(b.g.fn.copyPieces, ps, false); err != nil {
			return fmt.Errorf("nvidia: scattering device-local pages: %w", err)
		}
		done += k
	}
	return nil
}
