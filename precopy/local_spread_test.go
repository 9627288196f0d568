package precopy

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/gtt"
	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/precopy/stream"
	"github.com/gmig-dev/gmig/vgpu"
)

// The stop phase's device-local pages on the NVIDIA back end spread over
// every stream with the aperture's (local_stop.go), on the CUDA model
// (GMIG_CUDA_MODEL=2): what arrives, which streams carried it, and that a
// failing GPU read, a failing GPU hash or a killed extra stream fails the
// stop phase with every goroutine of it ended.

// cudaLocalPairSized serves a source cuda vGPU with local bytes of
// device-local memory on model GPU 0 and a destination on model GPU 1,
// at another pool offset, each with GPU isolation iso ("": the default).
func cudaLocalPairSized(t *testing.T, local uint64, iso string) (src, dst *migtest.Served) {
	t.Setenv(nvidia.ModelEnv, "2")
	serve := func(name string, gpu int, pad uint64) *migtest.Served {
		p := migtest.NewPool(t, 4*localGfx+local)
		if pad > 0 {
			migtest.NewVGPUConfig(t, p, vgpu.Config{Name: name + "-pad", MemSize: pad, GTTEntries: 16})
		}
		return migtest.Serve(t, migtest.NewVGPUConfig(t, p, vgpu.Config{Name: name, Backend: vgpu.BackendCUDA, GPU: gpu,
			GPUIsolation: iso, MemSize: localGfx, GTTEntries: 1024, LocalMemSize: local}))
	}
	return serve("src", 0, 0), serve("dst", 1, localGfx)
}

// readGPULocal reads all of v's device-local memory through its back end.
func readGPULocal(t *testing.T, v *vgpu.VGPU) []byte {
	t.Helper()
	n := uint64(len(v.LocalMemory()))
	out := make([]byte, n)
	must(t, v.GPU().Read(out, []gtt.Extent{{Off: v.Partition().ApertureEnd(), Len: n}}))
	return out
}

// scribbleLocal writes 8 bytes into each of local pages first, first+step, …
// (n pages) straight to the GPU, behind the engine's back.
func scribbleLocal(t *testing.T, v *vgpu.VGPU, first, step, n int) {
	t.Helper()
	g := v.GPU()
	for i := range n {
		p := first + i*step
		must(t, g.ModelWrite(g.DeviceAddrBase()+uint64(p)*stream.PageSize+uint64(i%512)*8, []byte{9, 8, 7, 6, 5, 4, 3, byte(i)}))
	}
}

// withJobPages runs the test with localJobPages set to n.
func withJobPages(t *testing.T, n int) {
	save := localJobPages
	localJobPages = n
	t.Cleanup(func() { localJobPages = save })
}

// ringLocal is local memory for 5 reads of localReadPages and a bit: the
// ring of localReadBuffers buffers goes round more than once.
const ringLocal = (5*localReadPages + 100) * stream.PageSize

// TestGPULocalSpread: a cuda vGPU's changed local pages, found by the GPU
// hash, go over 3 or 4 streams beside the aperture's pages — with the
// serial and the pipelined final scan, a one-shot pre-copy with 20 local
// pages changed (cut into jobs of 4 pages) and stop-and-copy over 10340
// local pages (five 8 MiB reads and a bit: the read buffers are reused) —
// and arrive whole: the destination's local memory equals the source's,
// its host receive buffer holds none of them (each stream's reader noted
// them for the GPU, which has them), and some went on the extra streams.
func TestGPULocalSpread(t *testing.T) {
	for _, c := range []struct {
		name     string
		strategy Strategy
		streams  int
		serial   bool
		local    uint64
		changed  int // local pages written after the pre-copy (every other one)
		jobPages int
	}{
		{name: "oneshot/serial/streams=3", strategy: OneShot, streams: 3, serial: true, local: localBytes, changed: 20, jobPages: 4},
		{name: "oneshot/pipelined/streams=4", strategy: OneShot, streams: 4, local: localBytes, changed: 20, jobPages: 4},
		{name: "stopcopy/serial/streams=4", strategy: StopCopy, streams: 4, serial: true, local: ringLocal, changed: 300},
		{name: "stopcopy/pipelined/streams=3", strategy: StopCopy, streams: 3, local: ringLocal, changed: 300},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.jobPages > 0 {
				withJobPages(t, c.jobPages)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			src, dst := cudaLocalPairSized(t, c.local, "")
			s, recv, _ := startOnStreams(ctx, t, src.V, dst.V, c.streams, Options{Strategy: c.strategy,
				Workers: PipelineMinWorkers, SerialStop: c.serial, Log: migtest.Log})
			if s.pipelined() == c.serial {
				t.Fatalf("pipelined %v, want %v", s.pipelined(), !c.serial)
			}
			must(t, s.Precopy(ctx))
			scribbleLocal(t, src.V, 1, 2, c.changed)
			rep, err := s.Stop(ctx)
			must(t, err)
			r := <-recv
			must(t, r.err)

			want := c.changed
			if c.strategy == StopCopy {
				want = int(c.local / stream.PageSize)
			}
			if rep.Stop.LocalPages != want || rep.Stop.Streams != c.streams {
				t.Errorf("%d local pages at the stop on %d streams, want %d on %d", rep.Stop.LocalPages, rep.Stop.Streams, want, c.streams)
			}
			if n := hostResident(t, dst.V); n != 0 {
				t.Errorf("the destination's host local range holds %d resident pages, want 0 (all on its GPU)", n)
			}
			if sl, dl := readGPULocal(t, src.V), readGPULocal(t, dst.V); string(sl) != string(dl) {
				t.Fatal("the destination's local memory differs from the source's")
			}
			spread, extra := s.shardLocal.Load(), s.shardPages.Load()
			if spread == 0 || spread > uint64(want) || spread > extra {
				t.Errorf("%d local pages on the extra streams (of %d pages there), want some of the %d", spread, extra, want)
			}
			t.Logf("%d of %d local pages on the %d extra streams, with %d aperture pages", spread, want, c.streams-1, extra-spread)
		})
	}
}

// startCuttable starts a migration of src into dst on k streams (a
// Source with opts, the destination's Receive): with kill, extra stream 1
// is cut after its second page batch. It returns the source, its main
// connection and the destination's result.
func startCuttable(ctx context.Context, t *testing.T, src, dst *vgpu.VGPU, k int, kill bool, opts Options) (*Source, net.Conn, <-chan received) {
	t.Helper()
	a, b := migtest.TCPPair(t)
	extra, next := streamPairs(t, k)
	recv := receive(ctx, b, dst, Options{NextStream: next, Log: migtest.Log})
	s, err := NewSource(src, a, opts)
	must(t, err)
	conns := make([]io.ReadWriter, len(extra))
	for i, e := range extra {
		conns[i] = e
	}
	if kill {
		conns[0] = &faultConn{Conn: extra[0], fault: func(_ int64, _ []byte, _ []span, f *follower) ([]byte, bool) {
			return nil, f.sections[stream.PageBatch] >= 2
		}}
	}
	if len(conns) > 0 {
		must(t, s.AddStreams(conns...))
	}
	return s, a, recv
}

// errInjected is a failure the tests inject into the GPU's local reader.
var errInjected = errors.New("test: injected device-local failure")

// failingLocal is a localPages whose Read (from the readOK+1-th call on)
// or Changed fails.
type failingLocal struct {
	localPages
	failChanged bool
	readOK      int32 // reads that succeed first
	reads       atomic.Int32
	failSnap    bool  // Snapshot fails too, from its snapOK+1-th call on
	snapOK      int32 // snapshots that succeed first
	snaps       atomic.Int32
}

func (f *failingLocal) Snapshot(first, n int, buf []byte) error {
	if f.failSnap && f.snaps.Add(1) > f.snapOK {
		return errInjected
	}
	return f.localPages.Snapshot(first, n, buf)
}

func (f *failingLocal) ChangedIn(first, n int) ([]int, error) {
	if f.failChanged {
		return nil, errInjected
	}
	return f.localPages.ChangedIn(first, n)
}

func (f *failingLocal) Read(pages []int, buf []byte) error {
	if f.reads.Add(1) > f.readOK {
		return errInjected
	}
	return f.localPages.Read(pages, buf)
}

// stopPhaseGoroutines returns the stacks of goroutines still inside the
// stop phase's senders, the device-local reader or the GPU reader.
func stopPhaseGoroutines() []string {
	buf := make([]byte, 4<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var left []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		for _, fn := range []string{"precopy.(*Source).sendShard(", "precopy.(*Source).readLocal(", "precopy.(*localState).withGPU("} {
			if strings.Contains(g, fn) {
				left = append(left, g)
				break
			}
		}
	}
	return left
}

// TestGPULocalSpreadFails: the stop phase fails, and returns with none of
// its goroutines left, when the GPU read of the changed local pages fails
// (at once, or after two 8 MiB reads: the reader holds buffers in the
// streams' queues), when the GPU hash fails, and when an extra stream is
// killed while local pages go over it (the reader waits for buffers the
// dead stream's sender must give back); the source rolls back and runs
// on, and the destination fails too.
func TestGPULocalSpreadFails(t *testing.T) {
	for _, c := range []struct {
		name     string
		strategy Strategy
		streams  int
		local    uint64
		inject   *failingLocal // nil: none
		kill     bool          // cut extra stream 1 after its second batch
		want     error         // Stop's error wraps it (kill: or ErrRefused)
	}{
		{name: "read/streams=1", strategy: OneShot, streams: 1, local: localBytes, inject: &failingLocal{}, want: errInjected},
		{name: "read/streams=3", strategy: OneShot, streams: 3, local: localBytes, inject: &failingLocal{}, want: errInjected},
		{name: "third read/streams=1", strategy: StopCopy, streams: 1, local: ringLocal, inject: &failingLocal{readOK: 2}, want: errInjected},
		{name: "third read/streams=4", strategy: StopCopy, streams: 4, local: ringLocal, inject: &failingLocal{readOK: 2}, want: errInjected},
		{name: "changed/streams=3", strategy: OneShot, streams: 3, local: localBytes, inject: &failingLocal{failChanged: true}, want: errInjected},
		{name: "stream killed/streams=4", strategy: StopCopy, streams: 4, local: ringLocal, kill: true, want: errCut},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			src, dst := cudaLocalPairSized(t, c.local, "")
			s, a, recv := startCuttable(ctx, t, src.V, dst.V, c.streams, c.kill, Options{Strategy: c.strategy, Workers: 2, SerialStop: true, Log: migtest.Log})
			defer s.Close()
			must(t, s.Precopy(ctx))
			scribbleLocal(t, src.V, 0, 1, 10)
			if c.inject != nil {
				s.local.mu.Lock()
				c.inject.localPages = s.local.gpu
				s.local.gpu = c.inject
				s.local.mu.Unlock()
			}

			done := make(chan error, 1)
			go func() {
				_, err := s.Stop(ctx)
				done <- err
			}()
			var serr error
			select {
			case serr = <-done:
			case <-time.After(time.Minute):
				t.Fatalf("Stop hangs; its goroutines:\n%s", strings.Join(stopPhaseGoroutines(), "\n\n"))
			}
			switch {
			case c.kill && (errors.Is(serr, errCut) || errors.Is(serr, ErrRefused)):
				// The cut, or the destination's refusal when it saw
				// the killed stream end first.
			case serr == nil || !errors.Is(serr, c.want) || !strings.HasPrefix(serr.Error(), "precopy: stop: "):
				t.Fatalf("Stop's error %v, want one wrapping %v", serr, c.want)
			}
			if left := stopPhaseGoroutines(); len(left) > 0 {
				t.Errorf("%d goroutines of the stop phase outlive it:\n%s", len(left), strings.Join(left, "\n\n"))
			}
			s.Rollback()
			a.Close()
			if r := <-recv; r.err == nil {
				t.Error("the destination accepted the migration")
			}
			if migtest.Quiesced(t, src.V) {
				t.Error("the source vGPU is still quiesced after Rollback")
			}
			t.Logf("source: %v", serr)
		})
	}
}

// gateConn is a connection for spread's own tests: once armed, each Write
// waits for open, then fails with errInjected if broken is set, else waits
// until a write deadline is set (interruptWrites) and fails with
// os.ErrDeadlineExceeded. Before arming (the stream header) writes pass.
type gateConn struct {
	armed    atomic.Bool
	broken   bool
	open     chan struct{}
	deadline chan struct{}
	once     sync.Once
}

func (c *gateConn) Write(p []byte) (int, error) {
	if !c.armed.Load() {
		return len(p), nil
	}
	<-c.open
	if c.broken {
		return 0, errInjected
	}
	<-c.deadline
	return 0, os.ErrDeadlineExceeded
}

func (c *gateConn) Read([]byte) (int, error) { return 0, io.EOF }

func (c *gateConn) SetWriteDeadline(time.Time) error {
	c.once.Do(func() { close(c.deadline) })
	return nil
}

// TestSpreadFinishesDirectJobs: every job handed to spread through direct
// is finished exactly once — written or not — when a stream fails: the
// failing stream's job, the jobs the other streams were writing
// (interrupted), and the jobs still queued, which the senders drain
// without writing; a producer waiting for a job's buffer to come back
// never hangs. Three streams, each with one job in flight and two queued
// when the main stream's write fails.
func TestSpreadFinishesDirectJobs(t *testing.T) {
	open := make(chan struct{})
	conns := make([]*gateConn, 3)
	ws := make([]*stream.Writer, 3)
	for i := range conns {
		conns[i] = &gateConn{broken: i == 0, open: open, deadline: make(chan struct{})}
		w, err := stream.NewWriter(conns[i])
		must(t, err)
		ws[i] = w
		conns[i].armed.Store(true)
	}
	s := &Source{conn: conns[0], w: ws[0], log: migtest.Log,
		shards: []*shardOut{{conn: conns[1], w: ws[1]}, {conn: conns[2], w: ws[2]}}}
	page := make([]byte, stream.PageSize)
	page[0] = 1 // not a zero page: its bytes are written
	const jobs = 9
	var finished [jobs]atomic.Int32
	err := s.spread(false, nil, func(direct func(pageJob) error) error {
		for i := range jobs {
			j := pageJob{idx: []uint32{uint32(i)}, copies: page, done: func() { finished[i].Add(1) }}
			if err := direct(j); err != nil {
				return err
			}
		}
		close(open) // all 9 are with the senders: 1 in flight, 2 queued on each stream
		return nil
	})
	if !errors.Is(err, errInjected) {
		t.Fatalf("spread returned %v, want the main stream's failure", err)
	}
	for i := range finished {
		if n := finished[i].Load(); n != 1 {
			t.Errorf("job %d finished %d times, want once", i, n)
		}
	}
}

// TestGPULocalLiveChunks: the pre-copy snapshots device-local memory a
// read buffer (localReadPages) at a time on a reader goroutine while the
// chunk before is written (sendLocalLiveGPU): over local memory of five
// buffers and a bit (the ring goes round), a one-shot migration on 3
// streams, whose stop hashes local memory in ranges of 1000 pages
// (ChangedIn) with changed pages in ten of them, arrives whole; a snapshot failing on its third chunk fails the pre-copy with
// the cause wrapped, and no snapshot is taken after it (the reader
// stopped; sendLocalLiveGPU returns only once it has).
func TestGPULocalLiveChunks(t *testing.T) {
	t.Run("whole", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		save := localHashPages
		localHashPages = 1000 // the stop hashes in 11 ranges, the changed pages in 10 of them
		t.Cleanup(func() { localHashPages = save })
		src, dst := cudaLocalPairSized(t, ringLocal, "")
		s, recv, _ := startOnStreams(ctx, t, src.V, dst.V, 3, Options{Strategy: OneShot, Workers: 2, SerialStop: true, Log: migtest.Log})
		must(t, s.Precopy(ctx))
		scribbleLocal(t, src.V, 7, 200, 50)
		rep, err := s.Stop(ctx)
		must(t, err)
		r := <-recv
		must(t, r.err)
		if rep.Stop.LocalPages != 50 {
			t.Errorf("%d local pages at the stop, want 50", rep.Stop.LocalPages)
		}
		if sl, dl := readGPULocal(t, src.V), readGPULocal(t, dst.V); string(sl) != string(dl) {
			t.Fatal("the destination's local memory differs from the source's")
		}
	})
	t.Run("snapshot fails", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		src, dst := cudaLocalPairSized(t, ringLocal, "")
		a, b := migtest.TCPPair(t)
		recv := receive(ctx, b, dst.V, Options{Log: migtest.Log})
		s, err := NewSource(src.V, a, Options{Strategy: OneShot, Workers: 2, SerialStop: true, Log: migtest.Log})
		must(t, err)
		defer s.Close()
		inject := &failingLocal{failSnap: true, snapOK: 2}
		s.local.mu.Lock()
		inject.localPages = s.local.gpu
		s.local.gpu = inject
		s.local.mu.Unlock()
		perr := s.Precopy(ctx)
		if !errors.Is(perr, errInjected) {
			t.Fatalf("Precopy's error %v, want one wrapping %v", perr, errInjected)
		}
		if n := inject.snaps.Load(); n != 3 {
			t.Errorf("%d snapshots, want 3 (the third failed, none after it)", n)
		}
		s.Rollback()
		a.Close()
		if r := <-recv; r.err == nil {
			t.Error("the destination accepted the migration")
		}
	})
}

// gpuSums is a localPages that passes ReadHashed on (counting the pages
// it gave hashes for), optionally making the hash of the first page of
// each read wrong.
type gpuSums struct {
	localPages
	pages   atomic.Int64
	corrupt bool
}

func (g *gpuSums) ReadHashed(pages []int, buf []byte, sums []uint64) (bool, error) {
	hr, ok := g.localPages.(hashedReader)
	if !ok {
		return false, nil
	}
	ok, err := hr.ReadHashed(pages, buf, sums)
	if ok && err == nil {
		g.pages.Add(int64(len(pages)))
		if g.corrupt && len(pages) > 0 {
			sums[0] ^= 1
		}
	}
	return ok, err
}

// TestGPULocalStopSendsGPUHashes: the stop phase's changed local pages go
// with the hashes the GPU computed when it found them (ReadHashed): every
// one of them, in the worker (its read buffers are views of its bulk
// buffer) and in process; the destination checks them, so one wrong hash
// fails the migration with the page's hash error and a whole stop phase
// arrives otherwise.
func TestGPULocalStopSendsGPUHashes(t *testing.T) {
	for _, c := range []struct {
		name    string
		iso     string
		corrupt bool
	}{
		{name: "worker", iso: ""},
		{name: "shared", iso: "shared"},
		{name: "worker/wrong hash", iso: "", corrupt: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			src, dst := cudaLocalPairSized(t, localBytes, c.iso)
			s, a, recv := startCuttable(ctx, t, src.V, dst.V, 3, false, Options{Strategy: OneShot, Workers: 2, Log: migtest.Log})
			defer s.Close()
			defer a.Close()
			must(t, s.Precopy(ctx))
			const changed = 20
			scribbleLocal(t, src.V, 1, 2, changed)
			sums := &gpuSums{corrupt: c.corrupt}
			s.local.mu.Lock()
			sums.localPages = s.local.gpu
			s.local.gpu = sums
			s.local.mu.Unlock()
			rep, err := s.Stop(ctx)
			if c.corrupt {
				s.Rollback()
				a.Close()
				r := <-recv
				if err == nil || r.err == nil || !errors.Is(r.err, stream.ErrPageHash) {
					t.Fatalf("with a wrong GPU hash: source %v, destination %v; want the destination's page hash error", err, r.err)
				}
				return
			}
			r := <-recv
			must(t, err)
			must(t, r.err)
			if got := sums.pages.Load(); got != changed || rep.Stop.LocalPages != changed {
				t.Fatalf("%d pages sent with the GPU's hashes, %d local pages at the stop; want %d", got, rep.Stop.LocalPages, changed)
			}
			if sl, dl := readGPULocal(t, src.V), readGPULocal(t, dst.V); string(sl) != string(dl) {
				t.Fatal("the destination's local memory differs from the source's")
			}
		})
	}
}

// baseAtLoad is a localLoader that records where the destination's
// device-local memory lay at its first load.
type baseAtLoad struct {
	localLoader
	v    *vgpu.VGPU
	once sync.Once
	base uint64
}

func (b *baseAtLoad) LoadLocal(pages []int, mem []byte) error {
	b.once.Do(func() { b.base = b.v.GPU().DeviceAddrBase() })
	return b.localLoader.LoadLocal(pages, mem)
}

// TestGPULocalPlacedBeforeStop: the destination puts its device-local
// memory at the source's device address when the pre-copy begins (the
// begin Meta says where), so the restore in the downtime moves nothing:
// its first load of received pages, before any restore, already finds it
// there.
func TestGPULocalPlacedBeforeStop(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src, dst := cudaLocalPairSized(t, localBytes, "")
	want, before := src.V.GPU().DeviceAddrBase(), dst.V.GPU().DeviceAddrBase()
	if want == before {
		t.Fatalf("source and destination local memory both at %#x before the migration: nothing to show", want)
	}
	at := &baseAtLoad{v: dst.V}
	save := wrapLoader
	wrapLoader = func(l localLoader) localLoader { at.localLoader = l; return at }
	t.Cleanup(func() { wrapLoader = save })
	s, a, recv := startCuttable(ctx, t, src.V, dst.V, 1, false, Options{Strategy: OneShot, Workers: 2, Log: migtest.Log})
	defer s.Close()
	defer a.Close()
	must(t, s.Precopy(ctx))
	_, err := s.Stop(ctx)
	must(t, err)
	must(t, (<-recv).err)
	if at.base != want {
		t.Errorf("the destination's first load found local memory at %#x, want the source's %#x (it was at %#x)", at.base, want, before)
	}
	if got := dst.V.GPU().DeviceAddrBase(); got != want {
		t.Errorf("after the migration the destination's local memory is at %#x, want %#x", got, want)
	}
}
