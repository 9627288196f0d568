package precopy

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/vgpu"
)

// Device-local memory (docs/device-abi.md §1.3) travels in the same
// PageBatch sections as graphics memory, as device pages numbered after
// the graphics pages (vgpu.DeviceMemory; docs/migration-stream.md §4).
// How its changed pages are found depends on where it lives:
//   - software back end: in the pool (vgpu.LocalMemory), written by the
//     engine alone, so its dirty set is exact (dirty.Marks, fed by the
//     same vgpu.ObserveWrites hook): the live phase sends it once, the stop
//     phase sends exactly the marked pages and hashes none of it;
//   - NVIDIA back end: on the GPU alone, where guest kernels write it
//     behind the engine's back (LAUNCH_GRID), so marks cannot say: the
//     back end reads it (localPages, nvidia.LocalTracker) and the stop
//     phase hashes it on the GPU, sending the pages whose hash changed:
//     hashed beside the aperture's scan, read in chunks while earlier
//     chunks are written, and spread over every stream with the
//     aperture's pages (local_stop.go).

// localPages is device-local memory a back end keeps where the host
// cannot read it, read through the back end and checked by hashing
// (nvidia.LocalTracker implements it). ChangedIn may run on one goroutine
// beside Read on another; other calls come one at a time.
type localPages interface {
	// Snapshot copies pages [first, first+n) into buf and records the
	// hashes of exactly those bytes (while the VM runs).
	Snapshot(first, n int, buf []byte) error
	// ChangedIn returns, ascending, the pages of [first, first+n) whose
	// content differs from what Snapshot recorded, and those never
	// snapshotted (VM stopped).
	ChangedIn(first, n int) ([]int, error)
	// Read copies the listed pages, in order, into buf.
	Read(pages []int, buf []byte) error
	Close() error
}

// errLocalClosed reports a use of local memory's reader after the
// migration ended.
var errLocalClosed = errors.New("precopy: device-local memory's reader is closed")

// localState is a Source's device-local memory; nil marks without any.
type localState struct {
	n      int          // local pages
	marks  *dirty.Marks // software back end; nil with gpu
	method string       // how changed pages are found, for the report
	mem    []byte       // vgpu.LocalMemory (software back end)
	dev    []byte       // vgpu.DeviceMemory: graphics memory, then local memory
	first  int          // device page number of local page 0: graphics memory's pages

	mu  sync.RWMutex // orders gpu's use against close (a rollback may race a pre-copy); read-locked by each use
	gpu localPages   // NVIDIA back end; nil with marks
}

// newLocal returns the local state of v, whose graphics memory has
// graphicsPages pages, or nil when it has no local memory.
func newLocal(v *vgpu.VGPU, graphicsPages int) (*localState, error) {
	dev := v.DeviceMemory()
	n := len(dev)/dirty.PageSize - graphicsPages
	if n <= 0 {
		return nil, nil
	}
	l := &localState{n: n, mem: dev[graphicsPages*dirty.PageSize:], dev: dev, first: graphicsPages}
	if g := v.GPU(); g != nil && g.LocalSize() > 0 {
		t, err := g.NewLocalTracker()
		if err != nil {
			return nil, fmt.Errorf("precopy: device-local memory: %w", err)
		}
		l.gpu, l.method = t, fmt.Sprintf("%s %s", nvidia.LocalMethod, sizeString(g.LocalSize()))
		return l, nil
	}
	l.marks, l.method = dirty.NewMarks(n), "engine marks"
	return l, nil
}

// pages is the number of local pages (0 for none).
func (l *localState) pages() int {
	if l == nil {
		return 0
	}
	return l.n
}

// withGPU runs f on the back end's reader unless close has run. Two may
// run at once: the stop phase's hash (ChangedIn) beside its reads, which
// the readers allow (nvidia.LocalTracker; a GPU worker's tracker answers
// them on connections of their own).
func (l *localState) withGPU(f func(localPages) error) error {
	l.mu.RLock()
	defer l.mu.RUnlock()
	if l.gpu == nil {
		return errLocalClosed
	}
	return f(l.gpu)
}

// close releases the back end's reader, if any.
func (l *localState) close() error {
	if l == nil {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.gpu == nil {
		return nil
	}
	err := l.gpu.Close()
	l.gpu = nil
	return err
}

// writeHook is the engine-write hook (vgpu.ObserveWrites, offsets in
// device memory): the graphics part to the tracker, the local part, if
// any, to l's marks (none on the NVIDIA back end: hashing finds its
// changes).
func writeHook(tr *dirty.Tracker, l *localState) func(off, n uint64) {
	if l == nil || l.marks == nil {
		return tr.MarkWritten
	}
	base := uint64(l.first) * dirty.PageSize
	return func(off, n uint64) {
		tr.MarkWritten(off, n)
		if end := off + n; end > base {
			lo := max(off, base)
			l.marks.MarkWritten(lo-base, end-lo)
		}
	}
}

// sendLocalLive sends every local page once while the VM runs: on the
// software back end each batch's marks are cleared before it is copied, so
// an engine write during or after the copy is marked and sent again at the
// stop; on the NVIDIA back end (sendLocalLiveGPU) the GPU records the hash
// of exactly the bytes it hands over.
func (s *Source) sendLocalLive(ctx context.Context) error {
	l := s.local
	s.prepareLocalStop()
	if l.marks == nil {
		return s.sendLocalLiveGPU(ctx)
	}
	for lo := 0; lo < l.pages(); lo += liveBatch {
		if err := s.check(ctx); err != nil {
			return err
		}
		pages := s.pages[:min(liveBatch, l.pages()-lo)]
		idx := s.idx[:len(pages)]
		for i := range pages {
			pages[i] = lo + i
			idx[i] = uint32(l.first + lo + i)
		}
		if err := l.marks.CopyClear(pages, l.mem, s.copies); err != nil {
			return err
		}
		_, err := s.w.WriteCopies(idx, s.copies[:len(pages)*dirty.PageSize], nil)
		s.noteSent()
		if err != nil {
			return err
		}
	}
	return nil
}

// sendLocalLiveGPU is sendLocalLive on the NVIDIA back end: a reader
// goroutine snapshots local memory a read buffer at a time (the stop
// phase's ring, localReadPages pages each) while this one writes the chunk
// before: each snapshot has a fixed cost (a device copy, the hash, a copy
// to the host and their synchronizations; through a GPU worker a round
// trip too), which 1 MiB snapshots paid 16384 times for 16 GiB (20 s of
// pre-copy on the H200, most of it waiting).
func (s *Source) sendLocalLiveGPU(ctx context.Context) error {
	l := s.local
	type chunk struct {
		lo, n int
		buf   []byte
	}
	per := len(s.localBufs[0]) / dirty.PageSize
	free := make(chan []byte, len(s.localBufs))
	for _, b := range s.localBufs {
		free <- b
	}
	ready := make(chan chunk, len(s.localBufs))
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var readErr error // set before ready is closed
	go func() {
		defer close(ready)
		for lo := 0; lo < l.pages(); lo += per {
			var buf []byte
			select {
			case buf = <-free:
			case <-rctx.Done():
				readErr = rctx.Err()
				return
			}
			n := min(per, l.pages()-lo)
			if err := l.withGPU(func(g localPages) error { return g.Snapshot(lo, n, buf) }); err != nil {
				readErr = fmt.Errorf("precopy: reading device-local pages [%d, +%d) from the GPU: %w", lo, n, err)
				return
			}
			ready <- chunk{lo, n, buf} // room for every buffer: never blocks
		}
	}()
	idx := make([]uint32, per)
	var err error
	for c := range ready {
		if err == nil {
			err = s.check(ctx)
		}
		if err != nil {
			cancel() // the reader stops; the loop drains what it read
			continue
		}
		for i := range c.n {
			idx[i] = uint32(l.first + c.lo + i)
		}
		_, err = s.w.WriteCopies(idx[:c.n], c.buf[:c.n*dirty.PageSize], nil)
		s.noteSent()
		free <- c.buf
	}
	if err != nil {
		return err
	}
	return readErr
}

// sizeString says n bytes in the largest binary unit that divides it.
func sizeString(n uint64) string {
	switch {
	case n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d KiB", n>>10)
}
