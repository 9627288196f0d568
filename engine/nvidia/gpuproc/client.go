package gpuproc

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/engine/nvidia"
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
// in-process back end; the local tracker's comparisons (Changed,
// ChangedIn) over a third, so that a stop phase's hash of the next range
// runs beside its read of the last one's pages. Like every engine.Backend its engine methods are
// called by one goroutine at a time (the engine's); DeviceAddrBase,
// Stats, ModelWrite, a local tracker and Close may be called from any.
type Client struct {
	cfg  Config
	log  zerolog.Logger
	cmd  *exec.Cmd
	eng  *conn
	side *conn
	cmp  *conn  // the local tracker's Changed and ChangedIn
	bulk []byte // the bulk buffer (bulk.go), mapped; nil once unmapped
	// views: the local tracker handed out views of the bulk buffer
	// (sideViews), so unmapBulk replaces the mapping rather than unmap it.
	views bool

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
	bulkN   atomic.Uint64 // calls whose payload crossed in the bulk buffer

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
		closeFiles(engC, engW)
		return nil, err
	}
	cmpC, cmpW, err := socketPair()
	if err != nil {
		closeFiles(engC, engW, sideC, sideW)
		return nil, err
	}
	bulkF, bulk, err := newBulk(cfg.Name)
	if err != nil {
		closeFiles(engC, engW, sideC, sideW, cmpC, cmpW)
		return nil, err
	}
	defer bulkF.Close() // the worker has its own descriptor, both the mapping
	cmd := &exec.Cmd{
		Path:       "/proc/self/exe", // this very executable, even if replaced on disk since
		Args:       []string{"gmig-gpu-worker", cfg.Name},
		Env:        append(os.Environ(), WorkerEnv+"="+cfg.Name),
		ExtraFiles: []*os.File{engW, sideW, cfg.Memfd, bulkF, cmpW},
		Stdout:     os.Stderr,
		Stderr:     os.Stderr,
	}
	err = cmd.Start()
	closeFiles(engW, sideW, cmpW)
	if err != nil {
		closeFiles(engC, sideC, cmpC)
		_ = syscall.Munmap(bulk)
		return nil, fmt.Errorf("gpuproc: starting the GPU worker of vGPU %s: %w", cfg.Name, err)
	}
	c := &Client{cfg: cfg, cmd: cmd, bulk: bulk, handles: map[uint32]bool{}, exited: make(chan struct{})}
	c.log = cfg.Log.With().Int("gpu_worker_pid", cmd.Process.Pid).Logger()
	c.eng, c.side, c.cmp = newConn(engC), newConn(sideC), newConn(cmpC)
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

// closeFiles closes fs (the descriptors of a start that failed, or the
// worker's ends once it has them).
func closeFiles(fs ...*os.File) {
	for _, f := range fs {
		f.Close()
	}
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
	c.cmp.shut()
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
	return c.callLocked(cn, op, req)
}

// callLocked is call with cn.mu held.
func (c *Client) callLocked(cn *conn, op Op, req *Msg) (Msg, error) {
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
// process exits and is waited for (killed if it does not exit in time),
// and the bulk buffer is unmapped.
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
	c.cmp.shut()
	<-c.exited
	c.unmapBulk()
	c.log.Info().Str("exit", c.cmd.ProcessState.String()).Msg("gpuproc: GPU worker stopped")
	return errors.Join(errs...)
}

// closeWait is how long Close waits for the worker to close its back end
// and exit.
const closeWait = 10 * time.Second
