package gpuproc

import (
	"fmt"

	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/internal/parcopy"
)

// The migration's reader of device-local memory, in the worker
// (nvidia.LocalTracker there), through the side connection; its
// comparisons (Changed, ChangedIn) through the comparison connection, so
// that they run beside its reads, as the LocalTracker allows.

// NewLocalTracker opens the worker's reader of device-local memory (one
// at a time).
func (c *Client) NewLocalTracker() (nvidia.LocalReader, error) {
	rep, err := c.call(c.side, OpTrackerOpen, &Msg{})
	if err != nil {
		return nil, err
	}
	return &tracker{c: c, pages: int(rep.A)}, nil
}

// tracker is the worker's local tracker, through the side connection.
type tracker struct {
	c     *Client
	pages int
}

func (t *tracker) Pages() int { return t.pages }

// ReadBuffers returns n buffers of size bytes (a multiple of 4096) in the
// bulk buffer's side region, which Snapshot and Read fill in place: the
// worker's copy from the GPU lands in them, with no copy out of the bulk
// buffer here (a migration's read buffers: 16 GiB of local memory at 1 %
// dirty is 164 MiB it would otherwise copy in the downtime). They must be
// used with this tracker alone, one call at a time, and stay valid memory
// after the worker is gone (unmapBulk). n*size is at most half of
// BulkSize.
func (t *tracker) ReadBuffers(n, size int) ([][]byte, error) { return t.c.sideViews(n, size) }

func (t *tracker) Snapshot(first, n int, buf []byte) error {
	if first < 0 || n < 0 || first+n > t.pages || len(buf) < n*pageSize {
		return fmt.Errorf("gpuproc: local snapshot of pages [%d, +%d) of %d into %d bytes", first, n, t.pages, len(buf))
	}
	if _, ok, err := t.c.viewCall(t.c.side, OpTrackerSnapshotBulk, &Msg{A: uint32(first), B: uint32(n)}, buf[:n*pageSize]); ok {
		return err
	}
	if n*pageSize >= bulkMin {
		per := bulkChunk / pageSize
		for done := 0; done < n; {
			k := min(per, n-done)
			out := buf[done*pageSize : (done+k)*pageSize]
			if err := t.c.bulkCall(t.c.side, OpTrackerSnapshotBulk, &Msg{A: uint32(first + done), B: uint32(k)}, k*pageSize,
				nil, func(b []byte) { parcopy.Copy(out, b) }); err != nil {
				return err
			}
			done += k
		}
		return nil
	}
	rep, err := t.c.call(t.c.side, OpTrackerSnapshot, &Msg{A: uint32(first), B: uint32(n)})
	if err != nil {
		return err
	}
	copy(buf, rep.Data)
	return nil
}

func (t *tracker) Changed() ([]int, error) {
	rep, err := t.c.call(t.c.cmp, OpTrackerChanged, &Msg{})
	if err != nil {
		return nil, err
	}
	return wordPages(rep.Words), nil
}

// wordPages is a page list as the wire has it (pageWords), back.
func wordPages(words []uint64) []int {
	out := make([]int, len(words))
	for i, w := range words {
		out[i] = int(w)
	}
	return out
}

func (t *tracker) ChangedIn(first, n int) ([]int, error) {
	if first < 0 || n < 0 || first+n > t.pages {
		return nil, fmt.Errorf("gpuproc: local pages [%d, +%d) of %d", first, n, t.pages)
	}
	rep, err := t.c.call(t.c.cmp, OpTrackerChangedIn, &Msg{A: uint32(first), B: uint32(n)})
	if err != nil {
		return nil, err
	}
	return wordPages(rep.Words), nil
}

func (t *tracker) Read(pages []int, buf []byte) error {
	if len(buf) < len(pages)*pageSize {
		return fmt.Errorf("gpuproc: %d local pages into %d bytes", len(pages), len(buf))
	}
	for _, p := range pages {
		if p < 0 || p >= t.pages {
			return fmt.Errorf("gpuproc: local page %d out of range [0, %d)", p, t.pages)
		}
	}
	if _, ok, err := t.c.viewCall(t.c.side, OpTrackerReadBulk, &Msg{Words: pageWords(pages)}, buf[:len(pages)*pageSize]); ok {
		return err
	}
	if len(pages)*pageSize >= bulkMin {
		per := bulkChunk / pageSize
		for done := 0; done < len(pages); {
			chunk := pages[done : done+min(per, len(pages)-done)]
			out := buf[done*pageSize : (done+len(chunk))*pageSize]
			if err := t.c.bulkCall(t.c.side, OpTrackerReadBulk, &Msg{Words: pageWords(chunk)}, len(chunk)*pageSize,
				nil, func(b []byte) { parcopy.Copy(out, b) }); err != nil {
				return err
			}
			done += len(chunk)
		}
		return nil
	}
	rep, err := t.c.call(t.c.side, OpTrackerRead, &Msg{Words: pageWords(pages)})
	if err != nil {
		return err
	}
	copy(buf, rep.Data)
	return nil
}

// ReadHashed is nvidia.LocalTracker's ReadHashed in the worker, for read
// buffers that are views of the side region (ReadBuffers): the pages land
// in buf, their GPU hashes come back in the reply. It reports false,
// reading nothing, for any other buf: the caller reads with Read and
// hashes the pages itself.
func (t *tracker) ReadHashed(pages []int, buf []byte, sums []uint64) (bool, error) {
	if len(buf) < len(pages)*pageSize || len(sums) < len(pages) {
		return false, fmt.Errorf("gpuproc: %d local pages into %d bytes and %d hashes", len(pages), len(buf), len(sums))
	}
	for _, p := range pages {
		if p < 0 || p >= t.pages {
			return false, fmt.Errorf("gpuproc: local page %d out of range [0, %d)", p, t.pages)
		}
	}
	rep, ok, err := t.c.viewCall(t.c.side, OpTrackerReadHashedBulk, &Msg{Words: pageWords(pages)}, buf[:len(pages)*pageSize])
	if !ok || err != nil {
		return ok, err
	}
	if len(rep.Words) != len(pages) {
		return true, fmt.Errorf("%w: %d hashes for %d pages", ErrMalformed, len(rep.Words), len(pages))
	}
	copy(sums, rep.Words)
	return true, nil
}

func (t *tracker) Close() error {
	_, err := t.c.call(t.c.side, OpTrackerClose, &Msg{})
	return err
}
