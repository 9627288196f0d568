package gpuproc

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/gtt"
	"github.com/gmig-dev/gmig/internal/cuda"
)

// Config starts a GPU worker for one vGPU.
type Config struct {
	Name string // the vGPU's, for logs
	GPU  int    // CUDA ordinal (nvidia.OpenGPU)
	// Memfd is the partition's memfd (its aperture at offset 0), handed
	// to the worker, which maps it; Window is gmigd's own mapping of it
	// (the page hasher reads it here).
	Memfd     *os.File
	Window    []byte
	WindowOff uint64 // extent offset of the window's byte 0 (the pool offset)
	LocalSize uint64 // device-local bytes, on the GPU alone
	Modules   bool   // guest modules
	// Landed is nvidia.NVIDIAConfig.Landed: called on the goroutine that
	// made the call during which the write-back stored, before the call
	// returns.
	Landed func(off, n uint64)
	// Log is the vGPU's logger (it names the vGPU); the client adds the
	// worker's pid.
	Log zerolog.Logger
}

// Client is a vGPU's back end in a GPU worker process: nvidia.VGPUBackend
// over the protocol (wire.go). Engine calls go over one connection, in
// order; LaunchGrid is posted (no round trip; a failure answers the next
// call); side calls (Stats, ModelWrite, the local tracker) go over a
// second connection so that they run beside the engine's, as on the
// in-process back end. Like every engine.Backend its engine methods are
// called by one goroutine at a time (the engine's); DeviceAddrBase,
// Stats, ModelWrite, a local tracker and Close may be called from any.
type Client struct {
	cfg  Config
	log  zerolog.Logger
	cmd  *exec.Cmd
	eng  *conn
	side *conn

	info      cuda.DeviceInfo
	base      atomic.Uint64 // DeviceAddrBase: set by open and PlaceLocal
	mirror    atomic.Uint64
	handles   map[uint32]bool // loaded guest modules (engine goroutine)
	lost      atomic.Pointer[lostError]
	ctxFailed sync.Once // the one log line of a sticky context error

	posts posts // LaunchGrid's frames on their way to the engine connection

	// pending says the worker may hold aperture bytes newer on the device
	// than in the window (a command wrote graphics memory since the last
	// successful Sync, which writes every such byte back). While it is
	// false the window is the truth everywhere, so Read and Write of the
	// aperture are served here, on gmigd's mapping of the same memfd, with
	// no round trip: the engine's ring fetch and parameter reads of a
	// stream of LAUNCH_GRIDs (whose kernels reach device-local memory
	// only) then cost no more than in process.
	pending atomic.Bool
	local   atomic.Uint64 // operations served here, for Stats

	closing atomic.Bool
	exited  chan struct{} // closed when the worker has been waited for
}

// posts holds posted frames until the poster goroutine (or the next call)
// writes them: the engine goroutine's LaunchGrid only appends, and a burst
// of launches leaves in few writes while the worker is already launching
// the first. Lock order: conn.mu, then posts.mu.
type posts struct {
	mu      sync.Mutex
	pending []byte
	spare   []byte
	wake    chan struct{} // capacity 1: the poster has work
}

// maxPending is how many bytes of posted frames may wait: past it, a post
// writes them itself (back pressure from a worker that launches slower
// than the guest asks).
const maxPending = 256 << 10

var _ nvidia.VGPUBackend = (*Client)(nil)

// conn is one connection's client end: one call at a time. Its socket is
// in blocking mode, read and written by plain system calls: a call's
// round trip then wakes no poller goroutine on either side (on a busy
// host that halves it).
type conn struct {
	mu   sync.Mutex
	c    *os.File
	fd   int // c's descriptor, for shutdown(2)
	fr   frameReader
	wbuf []byte
	once sync.Once // shut
}

// shut ends the connection, once: shutdown(2) first, which wakes a reader
// blocked in read(2) (closing a blocking descriptor would not), then
// close once no call uses it.
func (cn *conn) shut() {
	cn.once.Do(func() {
		_ = syscall.Shutdown(cn.fd, syscall.SHUT_RDWR)
		cn.mu.Lock()
		defer cn.mu.Unlock()
		_ = cn.c.Close()
	})
}

// Start starts a GPU worker for cfg's vGPU (a re-exec of this executable,
// WorkerEnv) and opens its back end: the GPU, the window, the device
// mirror and device-local memory, in the worker's own CUDA context.
func Start(cfg Config) (*Client, error) {
	engC, engW, err := socketPair()
	if err != nil {
		return nil, err
	}
	sideC, sideW, err := socketPair()
	if err != nil {
		engC.Close()
		engW.Close()
		return nil, err
	}
	cmd := &exec.Cmd{
		Path:       "/proc/self/exe", // this very executable, even if replaced on disk since
		Args:       []string{"gmig-gpu-worker", cfg.Name},
		Env:        append(os.Environ(), WorkerEnv+"="+cfg.Name),
		ExtraFiles: []*os.File{engW, sideW, cfg.Memfd},
		Stdout:     os.Stderr,
		Stderr:     os.Stderr,
	}
	err = cmd.Start()
	engW.Close()
	sideW.Close()
	if err != nil {
		engC.Close()
		sideC.Close()
		return nil, fmt.Errorf("gpuproc: starting the GPU worker of vGPU %s: %w", cfg.Name, err)
	}
	c := &Client{cfg: cfg, cmd: cmd, handles: map[uint32]bool{}, exited: make(chan struct{})}
	c.log = cfg.Log.With().Int("gpu_worker_pid", cmd.Process.Pid).Logger()
	c.eng, c.side = newConn(engC), newConn(sideC)
	c.posts.wake = make(chan struct{}, 1)
	go c.supervise()
	go c.poster()
	if err := c.open(); err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("gpuproc: opening vGPU %s's back end in its GPU worker: %w", cfg.Name, err)
	}
	c.log.Info().Msg("gpuproc: GPU worker started")
	return c, nil
}

// socketPair returns a connected pair of blocking unix stream sockets.
func socketPair() (mine, theirs *os.File, err error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("gpuproc: socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "gpu-worker"), os.NewFile(uintptr(fds[1]), "gpu-worker"), nil
}

func newConn(c *os.File) *conn { return &conn{c: c, fd: int(c.Fd()), fr: newFrameReader(c)} }

// The messages of the log lines a vGPU's loss writes (one each, with the
// vGPU's name and the cause), for operators' searches.
const (
	MsgWorkerEnded   = "gpuproc: the vGPU's GPU worker ended: its commands fail from now on (719 on their streams); gmigd and other vGPUs run on"
	MsgContextFailed = "gpuproc: the vGPU's GPU context failed (sticky): its commands fail from now on; other vGPUs run on"
)

// supervise waits for the worker's exit. An exit nobody asked for (a
// crash, a kill) ends the vGPU's back end: one log line names the vGPU and
// the cause, and every later call fails with ErrWorkerLost.
func (c *Client) supervise() {
	err := c.cmd.Wait()
	if err == nil {
		err = errors.New("exited")
	}
	c.markLost(fmt.Errorf("the worker (pid %d) %w", c.cmd.Process.Pid, err))
	if !c.closing.Load() {
		c.log.Error().Str("cause", c.cmd.ProcessState.String()).
			Msg(MsgWorkerEnded)
	}
	c.eng.shut()
	c.side.shut()
	close(c.exited)
}

func (c *Client) markLost(cause error) {
	c.lost.CompareAndSwap(nil, &lostError{cause: cause})
}

// Pid is the worker's process id.
func (c *Client) Pid() int { return c.cmd.Process.Pid }

// Alive reports whether the worker has not been given up (it runs, and
// answers).
func (c *Client) Alive() bool { return c.lost.Load() == nil }

// call sends a request on cn and waits for its reply, delivering the
// landed ranges that arrive before it.
func (c *Client) call(cn *conn, op Op, req *Msg) (Msg, error) {
	cn.mu.Lock()
	defer cn.mu.Unlock()
	if l := c.lost.Load(); l != nil {
		return Msg{}, l
	}
	if cn == c.eng {
		if err := c.flushLocked(); err != nil { // posts go first, in order
			return Msg{}, err
		}
	}
	cn.wbuf = appendFrame(cn.wbuf[:0], KindCall, op, req)
	if _, err := cn.c.Write(cn.wbuf); err != nil {
		return Msg{}, c.broken(op, err)
	}
	for {
		h, m, err := cn.fr.next()
		if err != nil {
			return Msg{}, c.broken(op, err)
		}
		switch {
		case h.Kind == KindLanded:
			if c.cfg.Landed != nil {
				c.cfg.Landed(m.X, m.Y)
			}
			continue
		case h.Op != op:
			return Msg{}, c.broken(op, fmt.Errorf("%w: a %s %s answering %s", ErrMalformed, kindName(h.Kind), h.Op, op))
		case h.Kind == KindReply:
			return m, nil
		case h.Kind == KindError:
			err := remoteErrorOf(m)
			if code := engine.StickyCode(err); code != 0 {
				c.ctxFailed.Do(func() {
					c.log.Error().Uint32("cuda", code).Err(err).
						Msg(MsgContextFailed)
				})
			}
			return Msg{}, err
		}
		return Msg{}, c.broken(op, fmt.Errorf("%w: a %s frame from the worker", ErrMalformed, kindName(h.Kind)))
	}
}

// post queues a request that has no reply for the poster goroutine.
func (c *Client) post(op Op, req *Msg) error {
	if l := c.lost.Load(); l != nil {
		return l
	}
	p := &c.posts
	p.mu.Lock()
	p.pending = appendFrame(p.pending, KindPost, op, req)
	full := len(p.pending) >= maxPending
	p.mu.Unlock()
	if full {
		c.eng.mu.Lock()
		defer c.eng.mu.Unlock()
		return c.flushLocked()
	}
	select {
	case p.wake <- struct{}{}:
	default:
	}
	return nil
}

// poster writes posted frames as they come, until the worker is gone.
func (c *Client) poster() {
	for {
		select {
		case <-c.posts.wake:
		case <-c.exited:
			return
		}
		c.eng.mu.Lock()
		_ = c.flushLocked() // a failure gives the worker up: the next call reports it
		c.eng.mu.Unlock()
	}
}

// flushLocked writes the posted frames (c.eng.mu held).
func (c *Client) flushLocked() error {
	p := &c.posts
	p.mu.Lock()
	buf := p.pending
	p.pending, p.spare = p.spare[:0], nil
	p.mu.Unlock()
	if len(buf) == 0 {
		p.mu.Lock()
		p.spare = buf
		p.mu.Unlock()
		return nil
	}
	if l := c.lost.Load(); l != nil {
		return l
	}
	_, err := c.eng.c.Write(buf)
	p.mu.Lock()
	p.spare = buf[:0]
	p.mu.Unlock()
	if err != nil {
		return c.broken(OpLaunchGrid, err)
	}
	return nil
}

// broken gives the worker up after a connection failed during op.
func (c *Client) broken(op Op, err error) error {
	c.markLost(fmt.Errorf("%s: %w", op, err))
	return c.lost.Load()
}

func (c *Client) open() error {
	var flags uint32
	if c.cfg.Modules {
		flags |= openModules
	}
	rep, err := c.call(c.eng, OpOpen, &Msg{A: uint32(c.cfg.GPU), B: flags, X: c.cfg.WindowOff, Y: c.cfg.LocalSize, Str: c.cfg.Name})
	if err != nil {
		return err
	}
	if err := json.Unmarshal(rep.Data, &c.info); err != nil {
		return fmt.Errorf("gpuproc: the worker's GPU description: %w", err)
	}
	c.base.Store(rep.X)
	c.mirror.Store(rep.Y)
	return nil
}

// Close ends the worker: its back end closes (device memory freed), the
// process exits and is waited for (killed if it does not exit in time).
func (c *Client) Close() error {
	if !c.closing.CompareAndSwap(false, true) {
		<-c.exited
		return nil
	}
	// A worker that neither answers nor exits in time is killed: its exit
	// ends a call waiting on it.
	kill := time.AfterFunc(closeWait, func() {
		c.log.Warn().Msg("gpuproc: the GPU worker did not close in time: killing it")
		_ = c.cmd.Process.Kill()
	})
	defer kill.Stop()
	var errs []error
	if c.lost.Load() == nil {
		if _, err := c.call(c.eng, OpClose, &Msg{}); err != nil && !errors.Is(err, ErrWorkerLost) {
			errs = append(errs, err)
		}
	}
	c.eng.shut() // the worker exits when its engine connection closes
	c.side.shut()
	<-c.exited
	c.log.Info().Str("exit", c.cmd.ProcessState.String()).Msg("gpuproc: GPU worker stopped")
	return errors.Join(errs...)
}

// closeWait is how long Close waits for the worker to close its back end
// and exit.
const closeWait = 10 * time.Second

func (c *Client) Name() string { return "nvidia" }

func (c *Client) do(op Op, m *Msg) error {
	_, err := c.call(c.eng, op, m)
	return err
}

// writes notes that an operation writing dst may leave aperture bytes
// pending on the device.
func (c *Client) writes(dst []gtt.Extent) {
	end := c.cfg.WindowOff + uint64(len(c.cfg.Window))
	for _, x := range dst {
		if x.Len > 0 && x.Off < end {
			c.pending.Store(true)
			return
		}
	}
}

func (c *Client) Copy(dst, src []gtt.Extent) error {
	c.writes(dst)
	return c.do(OpCopy, &Msg{Dst: dst, Src: src})
}

func (c *Client) Fill(dst []gtt.Extent, pattern uint32) error {
	c.writes(dst)
	return c.do(OpFill, &Msg{Dst: dst, A: pattern})
}

// Write stores src in the window itself when every extent is aperture and
// nothing is pending there (as the back end would: its Write copies into
// the window after writing back what is pending), else through the worker.
func (c *Client) Write(dst []gtt.Extent, src []byte) error {
	if !c.pending.Load() && c.lost.Load() == nil {
		if w, ok := c.windowSpans(dst, uint64(len(src))); ok {
			for _, b := range w {
				src = src[copy(b, src):]
			}
			c.local.Add(1)
			return nil
		}
	}
	return c.do(OpWrite, &Msg{Dst: dst, Data: src})
}

// windowSpans returns the window bytes xs name, if every extent lies in
// the aperture and they hold n bytes in all.
func (c *Client) windowSpans(xs []gtt.Extent, n uint64) ([][]byte, bool) {
	w, base := c.cfg.Window, c.cfg.WindowOff
	out := make([][]byte, 0, len(xs))
	var total uint64
	for _, x := range xs {
		if x.Off < base || x.Off-base > uint64(len(w)) || x.Len > uint64(len(w))-(x.Off-base) {
			return nil, false
		}
		out = append(out, w[x.Off-base:x.Off-base+x.Len])
		total += x.Len
	}
	return out, total == n
}

// Read reads through the worker. Once the worker is gone, reads that lie
// in the aperture are served from gmigd's own mapping of it (what the
// device had written back is there; the guest's CPU sees the same bytes):
// the engine still fetches the ring, so each later command is decoded and
// fails on its own stream with the lost context's 719, instead of the
// ring fetch failing as a page fault no stream reports.
//
// While nothing is pending (Client.pending) reads of the aperture are
// served from the window with no round trip, as Write's.
func (c *Client) Read(dst []byte, src []gtt.Extent) error {
	if !c.pending.Load() && c.lost.Load() == nil && c.readWindow(dst, src) {
		c.local.Add(1)
		return nil
	}
	rep, err := c.call(c.eng, OpRead, &Msg{Src: src, X: uint64(len(dst))})
	if errors.Is(err, ErrWorkerLost) && c.readWindow(dst, src) {
		return nil
	}
	if err != nil {
		return err
	}
	if len(rep.Data) != len(dst) {
		return c.broken(OpRead, fmt.Errorf("%w: %d bytes answering a read of %d", ErrMalformed, len(rep.Data), len(dst)))
	}
	copy(dst, rep.Data)
	return nil
}

// readWindow copies src from gmigd's mapping of the aperture, if every
// extent lies in it and the lengths match; it reports whether it did.
func (c *Client) readWindow(dst []byte, src []gtt.Extent) bool {
	w, ok := c.windowSpans(src, uint64(len(dst)))
	if !ok {
		return false
	}
	for _, b := range w {
		dst = dst[copy(dst, b):]
	}
	return true
}

func (c *Client) Saxpy(n uint64, a float32, x, y []gtt.Extent) error {
	c.writes(y)
	return c.do(OpSaxpy, &Msg{X: n, A: math.Float32bits(a), Src: x, Dst: y})
}

func (c *Client) Stencil(w, h uint32, in, out []gtt.Extent) error {
	c.writes(out)
	return c.do(OpStencil, &Msg{A: w, B: h, Src: in, Dst: out})
}

func (c *Client) Render(w, h uint32, frame uint64, fb []gtt.Extent) error {
	c.writes(fb)
	return c.do(OpRender, &Msg{A: w, B: h, X: frame, Dst: fb})
}

// Sync writes every pending byte back (in the worker): after a success the
// window is the truth again.
func (c *Client) Sync() error {
	err := c.do(OpSync, &Msg{})
	if err == nil {
		c.pending.Store(false)
	}
	return err
}

func (c *Client) LoadModule(handle uint32, m engine.Module) error {
	err := c.do(OpLoadModule, &Msg{C: handle, B: m.Handle, A: m.Args, Str: m.Entry, Data: m.PTX})
	if err == nil {
		c.handles[handle] = true
	}
	return err
}

func (c *Client) UnloadModule(handle uint32) error {
	delete(c.handles, handle) // the back end forgets it, whatever else fails
	return c.do(OpUnloadModule, &Msg{C: handle})
}

func (c *Client) LaunchModule(handle uint32, args []uint64) ([]gtt.Extent, error) {
	c.pending.Store(true) // a guest module writes the mirror anywhere
	rep, err := c.call(c.eng, OpLaunchModule, &Msg{C: handle, Words: args})
	return rep.Dst, err
}

func (c *Client) LaunchModuleParams(handle uint32, threads uint64, params []byte) ([]gtt.Extent, error) {
	c.pending.Store(true)
	rep, err := c.call(c.eng, OpLaunchModuleParams, &Msg{C: handle, X: threads, Data: params})
	return rep.Dst, err
}

// LaunchGrid posts the launch: no round trip. What the in-process back
// end refuses at once (modules off, an unknown handle) is refused here,
// alike; anything else the worker finds answers the next call, wrapping
// engine.ErrLaunchFailed.
func (c *Client) LaunchGrid(handle uint32, g engine.Grid, params []byte) error {
	if !c.cfg.Modules {
		return fmt.Errorf("%w: guest modules are off for this vGPU", engine.ErrNoModules)
	}
	if !c.handles[handle] {
		return fmt.Errorf("%w: no module %d in the back end", engine.ErrBadKernel, handle)
	}
	return c.post(OpLaunchGrid, &Msg{C: handle, Grid: g, Data: params})
}

func (c *Client) Place(va uint64) (uint64, error) {
	rep, err := c.call(c.eng, OpPlace, &Msg{X: va})
	if err == nil {
		c.mirror.Store(rep.X)
	}
	return rep.X, err
}

// DeviceAddrBase implements engine.Backend from any goroutine: the base
// the worker last reported (it moves only by PlaceLocal).
func (c *Client) DeviceAddrBase() uint64 { return c.base.Load() }

func (c *Client) Info() cuda.DeviceInfo { return c.info }

func (c *Client) MirrorBase() uint64 { return c.mirror.Load() }

func (c *Client) LocalSize() uint64 { return c.cfg.LocalSize }

func (c *Client) PlaceLocal(addr uint64) error {
	rep, err := c.call(c.eng, OpPlaceLocal, &Msg{X: addr})
	if rep.X != 0 || err == nil {
		c.base.Store(rep.X)
	}
	return err
}

// LoadLocal sends the listed pages of mem alone (the worker has no copy of
// local memory's host image: the pool's local range is gmigd's anonymous
// memory).
func (c *Client) LoadLocal(pages []int, mem []byte) error {
	words := make([]uint64, len(pages))
	data := make([]byte, 0, len(pages)*pageSize)
	for i, p := range pages {
		if p < 0 || (p+1)*pageSize > len(mem) {
			return fmt.Errorf("gpuproc: loading local page %d from %d bytes", p, len(mem))
		}
		words[i] = uint64(p)
		data = append(data, mem[p*pageSize:(p+1)*pageSize]...)
	}
	return c.do(OpLoadLocal, &Msg{Words: words, Data: data})
}

// PageHasher hashes the window from gmigd's own CUDA context: it reads
// the aperture (host memory) with gmig's kernels only, no guest code.
func (c *Client) PageHasher() (*nvidia.GPUHasher, error) {
	g, err := nvidia.OpenGPU(c.cfg.GPU)
	if err != nil {
		return nil, err
	}
	return g.NewHostHasher(c.cfg.Window)
}

func (c *Client) Stats() nvidia.NVIDIAStats {
	rep, err := c.call(c.side, OpStats, &Msg{})
	if err != nil || len(rep.Words) < 7 {
		return nvidia.NVIDIAStats{}
	}
	w := rep.Words
	return nvidia.NVIDIAStats{Commands: w[0] + c.local.Load(), HostReadBytes: w[1], WriteBackBytes: w[2], GapBytes: w[3],
		SyncBytes: w[4], ModuleLaunches: w[5], HashedBytes: w[6]}
}

func (c *Client) ModelWrite(addr uint64, b []byte) error {
	_, err := c.call(c.side, OpModelWrite, &Msg{X: addr, Data: b})
	return err
}

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

func (t *tracker) Snapshot(first, n int, buf []byte) error {
	if first < 0 || n < 0 || first+n > t.pages || len(buf) < n*pageSize {
		return fmt.Errorf("gpuproc: local snapshot of pages [%d, +%d) of %d into %d bytes", first, n, t.pages, len(buf))
	}
	rep, err := t.c.call(t.c.side, OpTrackerSnapshot, &Msg{A: uint32(first), B: uint32(n)})
	if err != nil {
		return err
	}
	copy(buf, rep.Data)
	return nil
}

func (t *tracker) Changed() ([]int, error) {
	rep, err := t.c.call(t.c.side, OpTrackerChanged, &Msg{})
	if err != nil {
		return nil, err
	}
	out := make([]int, len(rep.Words))
	for i, w := range rep.Words {
		out[i] = int(w)
	}
	return out, nil
}

func (t *tracker) Read(pages []int, buf []byte) error {
	if len(buf) < len(pages)*pageSize {
		return fmt.Errorf("gpuproc: %d local pages into %d bytes", len(pages), len(buf))
	}
	words := make([]uint64, len(pages))
	for i, p := range pages {
		words[i] = uint64(p)
	}
	rep, err := t.c.call(t.c.side, OpTrackerRead, &Msg{Words: words})
	if err != nil {
		return err
	}
	copy(buf, rep.Data)
	return nil
}

func (t *tracker) Close() error {
	_, err := t.c.call(t.c.side, OpTrackerClose, &Msg{})
	return err
}
