package gpuproc

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/gtt"
)

// The bulk buffer: a memfd of BulkSize bytes that gmigd creates for each
// worker (never handed to QEMU, never part of the pool) and both map.
// Payloads of bulkMin bytes and more — device-local memory's Write and
// Read, LoadLocal, the local tracker's Snapshot and Read — cross in it,
// in chunks of at most a region, while their frame carries only where
// (a Span) and the page list or extents: no copy into a frame, none
// through the socket, none out of it. Smaller payloads stay inline.
//
// Each connection has a region of its own (regionOf): the engine's calls
// and the side connection's (a pre-copy's Snapshot while the engine
// works) never share bytes. A region is used by one call at a time: the
// client holds the connection's lock from filling it to draining it, and
// the worker serves each connection on one goroutine.

// BulkSize is the bulk buffer's size: two regions of 32 MiB. 32 MiB a
// call keeps a round trip (tens of µs) under 1 % of the chunk's copy at
// memory speed, and the worst stop phase the design aims at (16 GiB of
// device-local memory at 1 % dirty: 164 MiB) crosses in six calls; the
// memfd's pages stay allocated once touched, per vGPU, so not larger.
const BulkSize = 64 << 20

// regionOf is the bulk buffer's region that op's connection uses: the
// engine connection's first half, the side connection's second.
func regionOf(op Op) Span {
	if op > 0 && op < opCount && layouts[op].side {
		return Span{Off: BulkSize / 2, Len: BulkSize / 2}
	}
	return Span{Off: 0, Len: BulkSize / 2}
}

// bulkMin is the smallest payload that goes through the bulk buffer: 64
// KiB, the frame reader's buffer, below which an inline payload arrives
// in the read(2) that brings its header. A variable for the benchmarks
// and tests alone (math.MaxInt: the socket only, the old path).
var bulkMin = 64 << 10

// bulkChunk is the most bytes one bulk call moves: a region (a multiple
// of pageSize). A variable for the tests alone, which lower it so that
// their payloads span several chunks.
var bulkChunk = BulkSize / 2

// newBulk creates and maps a worker's bulk buffer.
func newBulk(name string) (*os.File, []byte, error) {
	fd, err := unix.MemfdCreate("gmig-gpu-bulk-"+name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("gpuproc: the bulk buffer's memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "gmig-gpu-bulk")
	if err := f.Truncate(BulkSize); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("gpuproc: sizing the bulk buffer: %w", err)
	}
	mem, err := syscall.Mmap(fd, 0, BulkSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("gpuproc: mapping the bulk buffer: %w", err)
	}
	return f, mem, nil
}

// mapBulk maps the worker's bulk buffer at fd, which must be BulkSize
// bytes (the decoder's spans are checked against BulkSize).
func mapBulk(fd int) ([]byte, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("gpuproc: the bulk buffer: %w", err)
	}
	if st.Size != BulkSize {
		return nil, fmt.Errorf("gpuproc: the bulk buffer holds %d bytes, want %d", st.Size, BulkSize)
	}
	mem, err := syscall.Mmap(fd, 0, BulkSize, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("gpuproc: mapping the bulk buffer: %w", err)
	}
	return mem, nil
}

// bulkCall makes call op on cn with n bytes of cn's region: fill writes
// the request's bytes there before the call, drain reads the reply's
// after (either may be nil). The connection's lock is held throughout, so
// the region is this call's alone.
func (c *Client) bulkCall(cn *conn, op Op, req *Msg, n int, fill, drain func(b []byte)) error {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if l := c.lost.Load(); l != nil {
		return l // (the buffer may be unmapped: Close unmaps it once the worker is lost)
	}
	r := regionOf(op)
	b := c.bulk[r.Off : r.Off+uint64(n)]
	if fill != nil {
		fill(b)
	}
	req.Bulk = Span{Off: r.Off, Len: uint64(n)}
	c.bulkN.Add(1)
	if _, err := c.callLocked(cn, op, req); err != nil {
		return err
	}
	if drain != nil {
		drain(b)
	}
	return nil
}

// unmapBulk lets the client's bulk buffer go, once the worker is lost or
// stopped (no bulkCall then touches it). Where the local tracker has
// handed out views of its region (ReadBuffers: a migration's read buffers,
// which it may still read or write while it fails), the range is not
// unmapped but replaced by fresh anonymous memory at the same address:
// the views stay valid memory (zero pages, no resident cost until
// written) and the memfd's pages go with the worker; otherwise it is
// unmapped.
func (c *Client) unmapBulk() {
	c.eng.mu.Lock()
	c.side.mu.Lock()
	defer c.eng.mu.Unlock()
	defer c.side.mu.Unlock()
	if c.bulk == nil {
		return
	}
	if c.views {
		_, err := unix.MmapPtr(-1, 0, unsafe.Pointer(unsafe.SliceData(c.bulk)), uintptr(len(c.bulk)),
			unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_FIXED)
		if err == nil {
			c.bulk = nil
			return
		}
		c.log.Warn().Err(err).Msg("gpuproc: replacing the bulk buffer's mapping; it stays mapped")
		c.bulk = nil
		return
	}
	_ = syscall.Munmap(c.bulk)
	c.bulk = nil
}

// sideViews returns n views of size bytes each of the side connection's
// bulk region, back to back, for the local tracker's Snapshot and Read to
// copy into directly (viewSpan).
func (c *Client) sideViews(n, size int) ([][]byte, error) {
	r := regionOf(OpTrackerReadBulk)
	if n <= 0 || size <= 0 || size%pageSize != 0 || uint64(n*size) > r.Len {
		return nil, fmt.Errorf("gpuproc: %d read buffers of %d bytes in a %d-byte bulk region", n, size, r.Len)
	}
	c.side.mu.Lock()
	defer c.side.mu.Unlock()
	if l := c.lost.Load(); l != nil {
		return nil, l
	}
	c.views = true
	out := make([][]byte, n)
	for i := range out {
		off := r.Off + uint64(i*size)
		out[i] = c.bulk[off : off+uint64(size) : off+uint64(size)]
	}
	return out, nil
}

// viewSpan is where p lies in op's connection's bulk region, when it lies
// wholly there (one of sideViews' views, or a part of one): a call can
// then have the worker copy into or out of p itself.
func (c *Client) viewSpan(op Op, p []byte) (Span, bool) {
	if len(p) == 0 || len(c.bulk) == 0 {
		return Span{}, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(c.bulk)))
	at := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	r := regionOf(op)
	if at < base+uintptr(r.Off) || at+uintptr(len(p)) > base+uintptr(r.Off+r.Len) {
		return Span{}, false
	}
	return Span{Off: uint64(at - base), Len: uint64(len(p))}, true
}

// viewCall makes call op on cn with its bulk bytes at p, a view of cn's
// region (viewSpan): the worker reads or writes p itself, no copy here.
// It returns the worker's reply; it reports false, doing nothing, where p
// is not such a view.
func (c *Client) viewCall(cn *conn, op Op, req *Msg, p []byte) (Msg, bool, error) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if l := c.lost.Load(); l != nil {
		return Msg{}, true, l
	}
	sp, ok := c.viewSpan(op, p)
	if !ok {
		return Msg{}, false, nil
	}
	req.Bulk = sp
	c.bulkN.Add(1)
	rep, err := c.callLocked(cn, op, req)
	return rep, true, err
}

// bulkExtents is Write's and Read's bulk path: xs, holding n bytes, in
// chunks of at most bulkChunk bytes, each one call (do: the chunk's
// extents, its byte range of the payload).
func bulkExtents(xs []gtt.Extent, n uint64, do func(xs []gtt.Extent, from, to uint64) error) error {
	for from := uint64(0); from < n; {
		k := min(n-from, uint64(bulkChunk))
		var head []gtt.Extent
		head, xs = cutExtents(xs, k)
		if err := do(head, from, from+k); err != nil {
			return err
		}
		from += k
	}
	return nil
}

// cutExtents splits xs after its first n bytes.
func cutExtents(xs []gtt.Extent, n uint64) (head, tail []gtt.Extent) {
	for i, x := range xs {
		if x.Len >= n {
			head = append(xs[:i:i], gtt.Extent{Off: x.Off, Len: n})
			if x.Len > n {
				return head, append([]gtt.Extent{{Off: x.Off + n, Len: x.Len - n}}, xs[i+1:]...)
			}
			return head, xs[i+1:]
		}
		n -= x.Len
	}
	return xs, nil
}

// extentBytes is the bytes xs hold, and whether that sum fits a uint64.
func extentBytes(xs []gtt.Extent) (uint64, bool) {
	var n uint64
	for _, x := range xs {
		if x.Len > ^uint64(0)-n {
			return 0, false
		}
		n += x.Len
	}
	return n, true
}
