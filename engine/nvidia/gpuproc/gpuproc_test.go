package gpuproc

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/cespare/xxhash/v2"
	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/engine/cpuref"
	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/gtt"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/internal/syncbuf"
)

// The GPU worker under test is this test binary run again (the package's
// init serves it), on the CUDA model: each worker has a model GPU of its
// own, as each process has a CUDA context of its own.

const (
	testWindow = 1 << 20
	testLocal  = 256 << 10
)

// side is one back end over a partition of its own: through a worker, or
// in this process (for comparison).
type side struct {
	b      nvidia.VGPUBackend
	part   pool.Partition
	window []byte
	landed [][2]uint64
}

// newPool returns a pool for the test's partitions.
func newPool(t testing.TB) *pool.Pool { return newPoolSized(t, 8<<20) }

// newPoolSized returns a pool of size bytes.
func newPoolSized(t testing.TB, size uint64) *pool.Pool {
	t.Helper()
	p, err := pool.New(size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func allocPart(t testing.TB, p *pool.Pool, local uint64) (pool.Partition, []byte) {
	t.Helper()
	part, err := p.AllocLocal(testWindow, local)
	if err != nil {
		t.Fatal(err)
	}
	return part, p.Mem()[part.Offset:part.ApertureEnd():part.ApertureEnd()]
}

// startWorker starts a worker for a fresh partition of p.
func startWorker(t testing.TB, p *pool.Pool, modules bool, log zerolog.Logger) *side {
	t.Helper()
	return startWorkerLocal(t, p, modules, log, testLocal)
}

// startWorkerLocal is startWorker with local bytes of device-local memory.
func startWorkerLocal(t testing.TB, p *pool.Pool, modules bool, log zerolog.Logger, local uint64) *side {
	t.Helper()
	t.Setenv(nvidia.ModelEnv, "1")
	s := &side{}
	s.part, s.window = allocPart(t, p, local)
	f, err := p.File(s.part)
	if err != nil {
		t.Fatal(err)
	}
	c, err := Start(Config{Name: "test", Memfd: f, Window: s.window, WindowOff: s.part.Offset, LocalSize: local,
		Modules: modules, Landed: func(off, n uint64) { s.landed = append(s.landed, [2]uint64{off, n}) },
		Log: log.With().Str("vgpu", "test").Logger()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	s.b = c
	return s
}

// startInProcess is startWorker's back end in this process, on a model
// GPU of its own.
func startInProcess(t testing.TB, p *pool.Pool, modules bool) *side {
	t.Helper()
	return startInProcessLocal(t, p, modules, testLocal)
}

// startInProcessLocal is startInProcess with local bytes of device-local
// memory.
func startInProcessLocal(t testing.TB, p *pool.Pool, modules bool, local uint64) *side {
	t.Helper()
	s := &side{}
	s.part, s.window = allocPart(t, p, local)
	b, err := nvidia.NewNVIDIA(nvidia.NVIDIAConfig{GPU: nvidia.NewModelGPU(), Window: s.window, WindowOff: s.part.Offset,
		LocalSize: local, Modules: modules, Landed: func(off, n uint64) { s.landed = append(s.landed, [2]uint64{off, n}) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	s.b = b
	return s
}

// xs is [off, +n) of the window (or local memory, from testWindow on) as
// an extent of s's pool.
func (s *side) xs(off, n uint64) []gtt.Extent {
	return []gtt.Extent{{Off: s.part.Offset + off, Len: n}}
}

// withBulk sets the client's bulk threshold and chunk for the test (and
// its subtests): payloads of min bytes and more cross in the bulk buffer,
// chunk bytes a call.
func withBulk(t testing.TB, min, chunk int) {
	oldMin, oldChunk := bulkMin, bulkChunk
	bulkMin, bulkChunk = min, chunk
	t.Cleanup(func() { bulkMin, bulkChunk = oldMin, oldChunk })
}

// bulkModes runs test with payloads inline (the socket only) and through
// the bulk buffer, from 1 KiB, in chunks of chunk bytes.
func bulkModes(t *testing.T, chunk int, test func(t *testing.T)) {
	t.Run("inline", func(t *testing.T) { withBulk(t, math.MaxInt, BulkSize/2); test(t) })
	t.Run("bulk", func(t *testing.T) { withBulk(t, 1<<10, chunk); test(t) })
}

// TestClientMatchesInProcess: a random program of every engine operation
// on aperture and device-local memory gives, through the worker, the same
// results, errors, window bytes and landed ranges (in the same order) as
// the back end in this process; with payloads inline and through the
// bulk buffer (Writes and Reads of up to 8 KiB: above the threshold,
// in one chunk).
func TestClientMatchesInProcess(t *testing.T) {
	bulkModes(t, BulkSize/2, matchesInProcess)
}

func matchesInProcess(t *testing.T) {
	p := newPool(t)
	w, in := startWorker(t, p, false, zerolog.Nop()), startInProcess(t, p, false)
	rng := rand.New(rand.NewPCG(1, 2))
	span := func(limit uint64) (uint64, uint64) {
		n := 4 * (1 + rng.Uint64N(2048))
		return 4 * rng.Uint64N((limit-n)/4), n
	}
	for i := range 300 {
		var errs [2]error
		var reads [2][]byte
		op := rng.IntN(8)
		region := uint64(testWindow)
		if rng.IntN(3) == 0 {
			region = testWindow + testLocal
		}
		a, n := span(region)
		b, _ := span(region)
		data := make([]byte, n)
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		pat := rng.Uint32()
		for k, s := range []*side{w, in} {
			switch op {
			case 0:
				errs[k] = s.b.Write(s.xs(a, n), data)
			case 1:
				errs[k] = s.b.Fill(s.xs(a, n), pat)
			case 2:
				errs[k] = s.b.Copy(s.xs(b, n), s.xs(a, n))
			case 3:
				reads[k] = make([]byte, n)
				errs[k] = s.b.Read(reads[k], s.xs(a, n))
			case 4:
				errs[k] = s.b.Saxpy(n/4, 1.5, s.xs(a, n), s.xs(b, n))
			case 5:
				errs[k] = s.b.Render(uint32(n/4), 1, uint64(i), s.xs(a, n))
			case 6:
				errs[k] = s.b.Stencil(uint32(n/4), 1, s.xs(a, n), s.xs(b, n))
			case 7:
				errs[k] = s.b.Sync()
			}
		}
		if (errs[0] == nil) != (errs[1] == nil) {
			t.Fatalf("step %d (op %d): worker %v, in process %v", i, op, errs[0], errs[1])
		}
		if !bytes.Equal(reads[0], reads[1]) {
			t.Fatalf("step %d: reads differ", i)
		}
	}
	for _, s := range []*side{w, in} {
		if err := s.b.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(w.window, in.window) {
		t.Fatal("windows differ")
	}
	for _, s := range []*side{w, in} {
		if err := s.b.Fill(s.xs(0, 8), 1); err != nil { // an out-of-range extent fails alike
			t.Fatal(err)
		}
	}
	lw, li := make([]byte, testLocal), make([]byte, testLocal)
	must(t, w.b.Read(lw, w.xs(testWindow, testLocal)))
	must(t, in.b.Read(li, in.xs(testWindow, testLocal)))
	if !bytes.Equal(lw, li) {
		t.Fatal("device-local memories differ")
	}
	if len(w.landed) == 0 || len(w.landed) != len(in.landed) {
		t.Fatalf("%d landed ranges through the worker, %d in process", len(w.landed), len(in.landed))
	}
	for i := range w.landed {
		if w.landed[i] != in.landed[i] {
			t.Fatalf("landed range %d: %v through the worker, %v in process", i, w.landed[i], in.landed[i])
		}
	}
	if n := w.b.(*Client).bulkN.Load(); (bulkMin < math.MaxInt) != (n > 0) {
		t.Errorf("%d calls through the bulk buffer (threshold %d)", n, bulkMin)
	}
	err := w.b.Copy(w.xs(0, 8), w.xs(testWindow+testLocal, 8))
	if !errors.Is(err, errBitsSentinel(3)) {
		t.Errorf("copy outside the partition: %v, want cpuref.ErrBounds", err)
	}
}

func errBitsSentinel(i int) error { return errBits[i] }

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// scribbleParams is the hostile kernel's parameter buffer.
func scribbleParams(dst, words uint64, pattern uint32) []byte {
	b := binary.LittleEndian.AppendUint64(nil, dst)
	b = binary.LittleEndian.AppendUint64(b, words)
	return binary.LittleEndian.AppendUint32(b, pattern)
}

var grid1 = engine.Grid{X: 1, Y: 1, Z: 1, BlockX: 32, BlockY: 1, BlockZ: 1}

// TestClientLaunchGridPosted: launches are posted; a kernel that faults
// is reported by the next call (engine.ErrLaunchFailed, sticky code 719),
// the context stays failed (every later operation that reaches it answers
// 719), gmigd
// logs it once, and what the in-process back end refuses at once is
// refused at once.
func TestClientLaunchGridPosted(t *testing.T) {
	var log syncBuffer
	w := startWorker(t, newPool(t), true, zerolog.New(&log))
	c := w.b.(*Client)
	if err := c.LaunchGrid(9, grid1, nil); !errors.Is(err, engine.ErrBadKernel) {
		t.Errorf("launch of an unloaded module: %v, want ErrBadKernel", err)
	}
	must(t, c.LoadModule(1, engine.Module{Handle: 1, Entry: "scribble", PTX: []byte("ptx"), Args: 1}))
	base := c.DeviceAddrBase()
	must(t, c.LaunchGrid(1, grid1, scribbleParams(base+8, 4, 0xdeadbeef)))
	must(t, c.Sync())
	got := make([]byte, 32)
	must(t, c.Read(got, w.xs(testWindow, 32)))
	if binary.LittleEndian.Uint32(got[8:]) != 0xdeadbeef || binary.LittleEndian.Uint32(got[24:]) != 0 {
		t.Fatalf("local memory after the scribble: % x", got)
	}
	must(t, c.LaunchGrid(1, grid1, scribbleParams(base+(1<<40), 4, 1))) // nothing there
	err := c.Sync()
	if !errors.Is(err, engine.ErrLaunchFailed) || engine.StickyCode(err) != 719 {
		t.Fatalf("Sync after a faulting kernel: %v (sticky %d), want ErrLaunchFailed and 719", err, engine.StickyCode(err))
	}
	for name, call := range map[string]func() error{
		"fill":   func() error { return c.Fill(w.xs(0, 64), 7) },
		"read":   func() error { return c.Read(got, w.xs(testWindow, 32)) },
		"launch": func() error { must(t, c.LaunchGrid(1, grid1, scribbleParams(base, 1, 1))); return c.Sync() },
	} {
		if err := call(); engine.StickyCode(err) != 719 {
			t.Errorf("%s after the fault: %v, want sticky 719", name, err)
		}
	}
	if n := strings.Count(log.String(), MsgContextFailed); n != 1 {
		t.Errorf("%d log lines of the failed context, want 1:\n%s", n, log.String())
	}
}

// TestClientWorkerKilled: a worker killed under its vGPU ends that back
// end alone: calls fail with ErrWorkerLost and sticky code 719, one line
// is logged naming the vGPU and the signal, Close returns and no process
// is left.
func TestClientWorkerKilled(t *testing.T) {
	var log syncBuffer
	p := newPool(t)
	w := startWorker(t, p, false, zerolog.New(&log))
	other := startWorker(t, p, false, zerolog.Nop())
	c := w.b.(*Client)
	pid := c.Pid()
	must(t, syscall.Kill(pid, syscall.SIGKILL))
	select {
	case <-c.exited:
	case <-time.After(10 * time.Second):
		t.Fatal("the killed worker was not reaped")
	}
	err := c.Fill(w.xs(0, 64), 1)
	if !errors.Is(err, ErrWorkerLost) || engine.StickyCode(err) != 719 {
		t.Fatalf("fill on a killed worker: %v (sticky %d), want ErrWorkerLost and 719", err, engine.StickyCode(err))
	}
	if err := c.LaunchGrid(1, grid1, nil); err == nil {
		t.Error("launch on a killed worker succeeded")
	}
	must(t, other.b.Fill(other.xs(0, 64), 1))
	must(t, other.b.Sync())
	must(t, c.Close())
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("worker pid %d after Close: %v, want ESRCH", pid, err)
	}
	out := log.String()
	if n := strings.Count(out, MsgWorkerEnded); n != 1 || !strings.Contains(out, `"vgpu":"test"`) || !strings.Contains(out, "killed") {
		t.Errorf("log, want one line naming the vGPU and the signal:\n%s", out)
	}
}

// TestClientCloseEndsWorker: Close frees the back end and the worker
// exits, reaped.
func TestClientCloseEndsWorker(t *testing.T) {
	w := startWorker(t, newPool(t), false, zerolog.Nop())
	c := w.b.(*Client)
	pid := c.Pid()
	must(t, c.Close())
	if !c.cmd.ProcessState.Success() {
		t.Errorf("worker exit: %v", c.cmd.ProcessState)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("worker pid %d after Close: %v, want ESRCH", pid, err)
	}
	if err := c.Sync(); !errors.Is(err, ErrWorkerLost) {
		t.Errorf("Sync after Close: %v, want ErrWorkerLost", err)
	}
}

// TestClientLocalTracker: the migration's reader of device-local memory
// through the side connection: snapshots carry what commands wrote, a
// write behind the engine's back is found changed and read, and LoadLocal
// puts pages back; with payloads inline and through the bulk buffer in
// chunks of 3 pages (a whole snapshot, a read of the changed pages and a
// LoadLocal of every page span many chunks), while the engine connection
// moves bulk payloads of its own.
func TestClientLocalTracker(t *testing.T) {
	bulkModes(t, 3*pageSize, localTracker)
}

func localTracker(t *testing.T) {
	w := startWorker(t, newPool(t), false, zerolog.Nop())
	c := w.b
	data := bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7}, testLocal/7)
	data = append(data, make([]byte, testLocal-len(data))...)
	must(t, c.Write(w.xs(testWindow, testLocal), data))
	tr, err := c.NewLocalTracker()
	must(t, err)
	defer tr.Close()
	if tr.Pages() != testLocal/pageSize {
		t.Fatalf("%d pages, want %d", tr.Pages(), testLocal/pageSize)
	}
	// The pre-copy's snapshot on the side connection while the engine
	// connection writes and reads the same bytes back (its own region).
	snap := make([]byte, testLocal)
	engine := make(chan error, 1)
	go func() {
		back := make([]byte, testLocal/2)
		for range 8 {
			if err := c.Write(w.xs(testWindow, testLocal/2), data[:testLocal/2]); err != nil {
				engine <- err
				return
			}
			if err := c.Read(back, w.xs(testWindow, testLocal/2)); err != nil || !bytes.Equal(back, data[:testLocal/2]) {
				engine <- fmt.Errorf("engine read back: %v (equal %v)", err, bytes.Equal(back, data[:testLocal/2]))
				return
			}
		}
		engine <- nil
	}()
	must(t, tr.Snapshot(0, tr.Pages(), snap))
	must(t, <-engine)
	if !bytes.Equal(snap, data) {
		t.Fatal("snapshot differs from what was written")
	}
	for i, p := range []int{5, 6, 7, 20, 21, 40, 63} {
		must(t, c.ModelWrite(c.DeviceAddrBase()+uint64(p)*pageSize+9, []byte{'k', 'e', 'r', 'n', 'e', 'l', byte(i)}))
	}
	changed, err := tr.Changed()
	must(t, err)
	if fmt.Sprint(changed) != "[5 6 7 20 21 40 63]" {
		t.Fatalf("changed pages %v, want [5 6 7 20 21 40 63]", changed)
	}
	lo, err := tr.ChangedIn(0, 21)
	must(t, err)
	hi, err := tr.ChangedIn(21, tr.Pages()-21)
	must(t, err)
	if fmt.Sprint(lo, hi) != "[5 6 7 20] [21 40 63]" {
		t.Fatalf("ChangedIn halves %v %v, want [5 6 7 20] [21 40 63]", lo, hi)
	}
	if _, err := tr.ChangedIn(tr.Pages(), 1); err == nil {
		t.Error("ChangedIn past the last page succeeded")
	}
	pages := make([]byte, len(changed)*pageSize)
	must(t, tr.Read(changed, pages))
	for i := range changed {
		page := pages[i*pageSize : (i+1)*pageSize]
		if string(page[9:15]) != "kernel" || page[15] != byte(i) {
			t.Fatalf("read page %d: % x", changed[i], page[:16])
		}
	}
	// Into views of the side region, with the GPU's hashes; elsewhere,
	// nothing (the caller reads and hashes itself).
	hr := tr.(nvidia.HashedReader)
	sums := make([]uint64, len(changed))
	if ok, err := hr.ReadHashed(changed, pages, sums); ok || err != nil {
		t.Fatalf("ReadHashed into a buffer of the caller's: %v, %v; want false, nil", ok, err)
	}
	views, err := tr.(interface {
		ReadBuffers(n, size int) ([][]byte, error)
	}).ReadBuffers(1, len(pages))
	must(t, err)
	if ok, err := hr.ReadHashed(changed, views[0], sums); !ok || err != nil {
		t.Fatalf("ReadHashed into a view: %v, %v", ok, err)
	}
	for i := range changed {
		page := views[0][i*pageSize : (i+1)*pageSize]
		if !bytes.Equal(page, pages[i*pageSize:(i+1)*pageSize]) || sums[i] != xxhash.Sum64(page) {
			t.Fatalf("ReadHashed page %d: same as Read %v, hash %#x, xxhash64 %#x", changed[i],
				bytes.Equal(page, pages[i*pageSize:(i+1)*pageSize]), sums[i], xxhash.Sum64(page))
		}
	}
	all := make([]int, tr.Pages())
	for i := range all {
		all[i] = len(all) - 1 - i // descending: the list order is not the pages'
	}
	must(t, c.LoadLocal(all, data))
	must(t, tr.Read(changed, pages))
	for i, p := range changed {
		if !bytes.Equal(pages[i*pageSize:(i+1)*pageSize], data[p*pageSize:(p+1)*pageSize]) {
			t.Fatalf("LoadLocal did not put page %d back", p)
		}
	}
	if err := tr.Read([]int{tr.Pages()}, pages); err == nil {
		t.Error("read of a page past local memory succeeded")
	}
	if err := c.LoadLocal([]int{tr.Pages()}, make([]byte, testLocal+pageSize)); err == nil {
		t.Error("LoadLocal of a page past local memory succeeded")
	}
	if st := c.Stats(); st.Commands == 0 {
		t.Errorf("stats %+v: no commands counted", st)
	}
	// In chunks of 3 pages: the first Write (22 calls), the snapshot (22),
	// the engine's Writes and Reads (8 × 2 × 11), the reads of the
	// changed pages (2 × 3), the hashed read into a view (1: a view is
	// one call whatever its size), LoadLocal (22).
	if n := c.(*Client).bulkN.Load(); bulkMin < math.MaxInt && n != 22+22+8*2*11+2*3+1+22 {
		t.Errorf("%d bulk calls, want %d", n, 22+22+8*2*11+2*3+1+22)
	} else if bulkMin == math.MaxInt && n != 1 {
		t.Errorf("%d bulk calls with the bulk buffer off, want the view's 1", n)
	}
}

// syncBuffer is a log sink written by the client's goroutines.
type syncBuffer struct{ syncbuf.Buffer }

// TestBulkWriteOutOfBoundsStoresNothing: a Write of several bulk chunks
// whose last extent leaves local memory is refused for bounds and stores
// nothing, as in process, where every extent is checked before a byte
// moves; a Read of the same extents is refused too.
func TestBulkWriteOutOfBoundsStoresNothing(t *testing.T) {
	withBulk(t, 1<<10, 4<<10)
	p := newPool(t)
	w := startWorker(t, p, false, zerolog.Nop())
	const n = 16 << 10 // four chunks in local memory
	dst := append(w.xs(testWindow, n), gtt.Extent{Off: w.part.Offset + testWindow + testLocal - 4, Len: 8})
	data := make([]byte, n+8)
	for i := range data {
		data[i] = 0xa5
	}
	if err := w.b.Write(dst, data); !errors.Is(err, cpuref.ErrBounds) {
		t.Fatalf("Write past local memory: %v, want cpuref.ErrBounds", err)
	}
	if err := w.b.Read(make([]byte, n+8), dst); !errors.Is(err, cpuref.ErrBounds) {
		t.Fatalf("Read past local memory: %v, want cpuref.ErrBounds", err)
	}
	got := make([]byte, n)
	must(t, w.b.Read(got, w.xs(testWindow, n)))
	if i := bytes.IndexByte(got, 0xa5); i >= 0 {
		t.Fatalf("the refused Write stored local byte %d (of %d)", i, n)
	}
}

// TestTrackerReadBuffers: the local tracker's read buffers are views of
// the bulk buffer's side region that Snapshot and Read fill in place —
// the worker copies into the view it is given, not into the region's
// start (another view, left as it was) for a copy out here — and they
// stay valid memory after the worker is killed and the client closed.
func TestTrackerReadBuffers(t *testing.T) {
	w := startWorker(t, newPool(t), false, zerolog.Nop())
	c := w.b.(*Client)
	data := make([]byte, testLocal)
	for i := range data {
		data[i] = byte(i*7 + i/4096)
	}
	must(t, c.Write(w.xs(testWindow, testLocal), data))
	tr, err := c.NewLocalTracker()
	must(t, err)
	rb, ok := tr.(interface {
		ReadBuffers(n, size int) ([][]byte, error)
	})
	if !ok {
		t.Fatal("the worker's tracker has no ReadBuffers")
	}
	if _, err := rb.ReadBuffers(4, BulkSize/4); err == nil {
		t.Error("ReadBuffers beyond the side region succeeded")
	}
	if _, err := rb.ReadBuffers(2, 100); err == nil {
		t.Error("ReadBuffers of a size that is no page multiple succeeded")
	}
	bufs, err := rb.ReadBuffers(4, testLocal)
	must(t, err)
	sentinel := bytes.Repeat([]byte{0xee}, testLocal)
	copy(bufs[0], sentinel)
	before := c.bulkN.Load()
	must(t, tr.Snapshot(0, tr.Pages(), bufs[2]))
	if !bytes.Equal(bufs[2], data) {
		t.Fatal("the snapshot in a read buffer differs from local memory")
	}
	must(t, c.ModelWrite(c.DeviceAddrBase()+3*pageSize+11, []byte("scribble")))
	changed, err := tr.Changed()
	must(t, err)
	if fmt.Sprint(changed) != "[3]" {
		t.Fatalf("changed pages %v, want [3]", changed)
	}
	must(t, tr.Read(changed, bufs[3][:pageSize]))
	want := append([]byte(nil), data[3*pageSize:4*pageSize]...)
	copy(want[11:], "scribble")
	if !bytes.Equal(bufs[3][:pageSize], want) {
		t.Fatal("the page read into a read buffer differs from local memory")
	}
	if n := c.bulkN.Load() - before; n != 2 {
		t.Errorf("%d bulk calls for a snapshot and a read into views, want 2", n)
	}
	if !bytes.Equal(bufs[0], sentinel) {
		t.Fatal("a call into one read buffer wrote another (the region's start)")
	}
	must(t, syscall.Kill(c.Pid(), syscall.SIGKILL))
	<-c.exited
	if err := tr.Read(changed, bufs[3][:pageSize]); !errors.Is(err, ErrWorkerLost) {
		t.Errorf("read on a killed worker: %v, want ErrWorkerLost", err)
	}
	must(t, c.Close())
	for _, b := range bufs { // valid memory still: no fault
		b[0], b[len(b)-1] = 1, 2
	}
}
