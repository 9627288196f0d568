package precopy

import (
	"context"

	"github.com/gmig-dev/gmig/dirty"
)

// Device-local memory (docs/device-abi.md §1.3) travels in the same
// PageBatch sections as graphics memory, as device pages numbered after
// the graphics pages (vgpu.DeviceMemory; docs/migration-stream.md §4).
// Only the engine writes it, so its dirty set is exact (dirty.Marks, fed
// by the same vgpu.ObserveWrites hook): the live phase sends it once, the
// stop phase sends exactly the marked pages and hashes none of it.

// localState is a Source's device-local memory; nil marks without any.
type localState struct {
	marks *dirty.Marks
	mem   []byte // vgpu.LocalMemory
	dev   []byte // vgpu.DeviceMemory: graphics memory, then local memory
	first int    // device page number of local page 0: graphics memory's pages
}

// newLocal returns the local state of a vGPU with dev as its device memory
// and graphics memory of graphicsPages pages, or nil when it has no local
// memory.
func newLocal(dev []byte, graphicsPages int) *localState {
	n := len(dev)/dirty.PageSize - graphicsPages
	if n <= 0 {
		return nil
	}
	return &localState{
		marks: dirty.NewMarks(n),
		mem:   dev[graphicsPages*dirty.PageSize:],
		dev:   dev,
		first: graphicsPages,
	}
}

// pages is the number of local pages (0 for none).
func (l *localState) pages() int {
	if l == nil {
		return 0
	}
	return l.marks.Pages()
}

// writeHook is the engine-write hook (vgpu.ObserveWrites, offsets in
// device memory): the graphics part to the tracker, the local part, if
// any, to l's marks.
func writeHook(tr *dirty.Tracker, l *localState) func(off, n uint64) {
	if l == nil {
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

// sendLocalLive sends every local page once while the VM runs: each
// batch's marks are cleared before it is copied, so an engine write during
// or after the copy is marked and sent again at the stop.
func (s *Source) sendLocalLive(ctx context.Context) error {
	l := s.local
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

// sendLocalStop sends, with the VM stopped, the local pages the engine
// wrote since they were sent (every one for stop-and-copy, which sent
// none), straight from the frozen memory, and counts them in rep as
// engine-marked dirty pages (Unrecorded for stop-and-copy), hashing none
// to find them.
func (s *Source) sendLocalStop(rep *Report) error {
	l := s.local
	if l == nil {
		return nil
	}
	var pages []int
	src := dirty.Engine
	if s.opts.Strategy == StopCopy {
		pages, src = make([]int, l.pages()), dirty.Unrecorded
		for i := range pages {
			pages[i] = i
		}
	} else {
		pages = l.marks.Marked()
	}
	idx := make([]uint32, len(pages))
	for i, p := range pages {
		idx[i] = uint32(l.first + p)
	}
	_, err := s.w.WritePages(idx, l.dev, nil)
	s.noteSent()
	rep.Stop.LocalPages = len(pages)
	rep.Stop.DirtyPages += len(pages)
	rep.Stop.BySource[src] += len(pages)
	return err
}
