package hostd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/hostd/qemu"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/precopy"
	"github.com/gmig-dev/gmig/precopy/native"
	"github.com/gmig-dev/gmig/vgpu"
)

// Defaults for Config.
const (
	DefaultPoolSize = 1 << 30
	DefaultRunDir   = "/run/gmig"
)

// Config sets up a Host.
type Config struct {
	PoolSize uint64 // bytes of graphics memory shared by all vGPUs
	// RunDir holds the control socket, the vGPUs' vfio-user sockets
	// (RunDir/vgpu/NAME.sock), the VMs' files and the migration records;
	// one gmigd at a time owns it (RunDir/gmigd.lock).
	RunDir string
	Log    zerolog.Logger
	// QEMURoot is where QEMU 11.1 is installed (the provisioned root) for
	// VMs gmigd starts, its own and incoming ones.
	QEMURoot qemu.Root
	// Sims holds the in-process simulated VMs that migrations of kind
	// "sim" move (gmigd demo and bench); nil: such migrations are refused.
	Sims *sim.Registry
	// Transport connects to peers for migrations, both ways (nil: plain
	// TCP; gmigd serve gives it internal/mtls's mutual TLS).
	Transport orchestrator.Transport
	// Timeouts bound the migration conversation (zero: the defaults).
	Timeouts orchestrator.Timeouts
	// Streams is the vGPU stop phase's stream count: an outgoing
	// migration's, unless its request says, and the most an incoming one
	// takes (0: precopy.DefaultStreams out, precopy.MaxDefaultStreams in).
	Streams int
	// OnHeartbeat, if set, sees every guest HEARTBEAT write of every vGPU
	// on this host, created or arrived by migration, stamped with this
	// host's clock: the largest gap between consecutive values is the
	// guest-observed downtime.
	OnHeartbeat func(vgpu string, value uint64, at time.Time)
	// GPU is the GPU cuda vGPUs run on (gpu.go): "" CUDA's first, as
	// always; an index or a UUID as `gmigd status` lists them; GPUNone:
	// cuda vGPUs are refused. One not on the host fails New.
	GPU string
	// GPULockDir holds the per-GPU locks that keep two gmigd off one GPU
	// (gmigd serve: DefaultGPULockDir); "": no lock is taken (in-process
	// hosts that share a GPU on purpose).
	GPULockDir string
}

// Sentinel errors callers branch on (the control API maps them to HTTP
// status codes).
var (
	ErrExists   = errors.New("hostd: vGPU already exists")
	ErrNotFound = errors.New("hostd: no such vGPU")
	ErrName     = errors.New("hostd: invalid name")
	ErrClosed   = errors.New("hostd: host is shut down")
	// ErrBusy: a migration holds the vGPU (its memory is being sent or
	// received) or a VM uses it; it is left as it is.
	ErrBusy = errors.New("hostd: vGPU is in use")
)

// nameRE is what a vGPU or VM name may be: it becomes a file name
// (RUN_DIR/vgpu/NAME.sock, RUN_DIR/vms/NAME/) and a URL path segment.
var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// CheckName says whether name may name a vGPU or a VM (ErrName if not).
// The control API, a migration's destination and the CLI all check with it.
func CheckName(name string) error {
	if !nameRE.MatchString(name) {
		return fmt.Errorf("%w: %q (want 1-32 of a-z 0-9 _ -, starting with a letter or digit)", ErrName, name)
	}
	return nil
}

// Info describes one vGPU for listings.
type Info struct {
	Name       string `json:"name"`
	State      string `json:"state"` // live, incoming (a migration arriving), migrating (leaving)
	Socket     string `json:"socket"`
	MemSize    uint64 `json:"mem_size"`
	GTTEntries uint32 `json:"gtt_entries"`
	Backend    string `json:"backend"` // software or cuda
	// LocalMemSize is the device-local memory (0: none).
	LocalMemSize uint64 `json:"local_mem_size,omitempty"`
	GPU          string `json:"gpu,omitempty"` // cuda: the UUID of the GPU it runs on
	// GPUIsolation is a cuda vGPU's: "process" or "shared" (vgpu.Config).
	GPUIsolation string `json:"gpu_isolation,omitempty"`
	// GPUWorkerPID is the process id of its GPU worker (isolation
	// "process"; 0 when it has none, or the worker has ended).
	GPUWorkerPID int        `json:"gpu_worker_pid,omitempty"`
	PoolOffset   uint64     `json:"pool_offset"`
	Stats        vgpu.Stats `json:"stats"`
}

// vGPU states.
const (
	stateLive      = "live"
	stateIncoming  = "incoming"
	stateMigrating = "migrating"
)

// Host owns the pool and the vGPUs of one gmigd.
type Host struct {
	cfg  Config
	log  zerolog.Logger
	pool *pool.Pool

	mu    sync.Mutex
	vgpus map[string]*served
	vms   map[string]*vmRec
	// destroying holds the names of vGPUs whose shutdown is under way,
	// out of vgpus already; each channel closes when its shutdown is
	// done. A name is not given again before then (lockName).
	destroying map[string]chan struct{}
	closed     bool

	metrics *metrics
	lock    *os.File // RunDir's lock, held until Close
	jobs    jobTable // outgoing migrations (jobs.go)
	gpu     *GPU     // the GPU cuda vGPUs run on (nil: none chosen)
	gpuLock *os.File // its lock in GPULockDir, held until Close
}

// served is a vGPU with its vfio-user listener and server goroutine.
type served struct {
	v      *vgpu.VGPU
	native *native.Device // v with the vfio-user migration interface
	socket string
	sockFI os.FileInfo // the socket file this vGPU bound (removeOwn)
	stop   context.CancelFunc
	done   chan error
	state  string
	beats  *orchestrator.Heartbeats
}

// New locks the run directory (ErrRunDirInUse while another gmigd holds
// it), sets it up and creates the pool; then it recovers what the last
// gmigd of the run directory left.
func New(cfg Config) (*Host, error) {
	if cfg.PoolSize == 0 {
		cfg.PoolSize = DefaultPoolSize
	}
	if cfg.RunDir == "" {
		cfg.RunDir = DefaultRunDir
	}
	if err := os.MkdirAll(cfg.RunDir, 0o750); err != nil {
		return nil, fmt.Errorf("hostd: creating run directory: %w", err)
	}
	lock, err := lockRunDir(cfg.RunDir)
	if err != nil {
		return nil, err
	}
	h := &Host{cfg: cfg, log: cfg.Log, vgpus: map[string]*served{}, vms: map[string]*vmRec{},
		destroying: map[string]chan struct{}{}, metrics: newMetrics(), lock: lock}
	if err := h.prepareRunDir(); err != nil {
		lock.Close()
		return nil, err
	}
	if err := h.claimGPU(); err != nil {
		lock.Close()
		return nil, err
	}
	if h.pool, err = pool.New(cfg.PoolSize); err != nil {
		h.releaseGPU()
		lock.Close()
		return nil, fmt.Errorf("hostd: creating %d-byte pool: %w", cfg.PoolSize, err)
	}
	h.recoverMigrations()
	h.recoverVMs()
	h.recoverVGPUs()
	h.log.Info().Uint64("pool_size", cfg.PoolSize).Str("run_dir", cfg.RunDir).Msg("host ready")
	return h, nil
}

// Pool returns the host's graphics-memory pool.
func (h *Host) Pool() *pool.Pool { return h.pool }

// Create makes a vGPU and starts serving it on RunDir/vgpu/NAME.sock.
func (h *Host) Create(cfg vgpu.Config) (Info, error) {
	h.lockName(cfg.Name)
	defer h.mu.Unlock()
	s, err := h.createLocked(cfg, stateLive)
	if err != nil {
		return Info{}, err
	}
	return s.info(), nil
}

// lockName takes the host lock once no vGPU of name is being destroyed:
// a vGPU made under that name afterwards gets its socket path and its
// memory only when the last one has let go of them.
func (h *Host) lockName(name string) {
	for {
		h.mu.Lock()
		ch, ok := h.destroying[name]
		if !ok {
			return
		}
		h.mu.Unlock()
		<-ch
	}
}

// createLocked makes a vGPU in state and serves it (lockName first).
func (h *Host) createLocked(cfg vgpu.Config, state string) (*served, error) {
	if err := CheckName(cfg.Name); err != nil {
		return nil, err
	}
	if h.closed {
		return nil, ErrClosed
	}
	if _, ok := h.vgpus[cfg.Name]; ok {
		return nil, fmt.Errorf("%w: %s", ErrExists, cfg.Name)
	}
	cfg, err := h.gpuFor(cfg)
	if err != nil {
		return nil, err
	}
	beats := orchestrator.NewHeartbeats()
	name, own, all := cfg.Name, cfg.OnHeartbeat, h.cfg.OnHeartbeat
	cfg.OnHeartbeat = func(v uint64, at time.Time) {
		beats.Record(v, at)
		if own != nil {
			own(v, at)
		}
		if all != nil {
			all(name, v, at)
		}
	}
	v, err := vgpu.New(cfg, h.pool, h.log)
	if err != nil {
		return nil, err
	}
	s, err := h.serveLocked(v)
	if err != nil {
		_ = v.Close()
		return nil, err
	}
	s.state, s.beats = state, beats
	h.vgpus[cfg.Name] = s
	return s, nil
}

func (h *Host) serveLocked(v *vgpu.VGPU) (*served, error) {
	path := h.vgpuSocket(v.Name())
	if _, err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	// The path is removed by shutdown, and only while it is still this
	// listener's socket (removeOwn).
	l, fi, err := bindSocket(path, vgpuSocketMode)
	if err != nil {
		return nil, fmt.Errorf("hostd: listening on %s: %w", path, err)
	}
	// Served through native.Device: the vfio-user migration interface
	// (DEVICE_FEATURE, MIG_DATA_*) is there for a client that drives it.
	n, err := native.New(v, precopy.Options{Log: h.log})
	if err != nil {
		_ = l.Close()
		_ = os.Remove(path)
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &served{v: v, native: n, socket: path, sockFI: fi, stop: stop, done: make(chan error, 1)}
	go func() {
		err := v.ServeDevice(ctx, l, n)
		_ = l.Close()
		s.done <- err
	}()
	h.log.Info().Str("vgpu", v.Name()).Str("socket", path).Msg("vgpu serving")
	return s, nil
}

func (s *served) info() Info {
	c := s.v.Config()
	info := Info{
		Name: c.Name, State: s.state, Socket: s.socket, MemSize: c.MemSize, GTTEntries: c.GTTEntries, Backend: c.Backend,
		LocalMemSize: c.LocalMemSize, PoolOffset: s.v.Partition().Offset, Stats: s.v.Stats(),
	}
	if g := s.v.GPU(); g != nil {
		info.GPU = g.Info().UUID
		info.GPUIsolation, info.GPUWorkerPID = c.GPUIsolation, s.v.GPUWorkerPID()
	}
	return info
}

// Get returns one vGPU's description.
func (h *Host) Get(name string) (Info, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.vgpus[name]
	if !ok {
		return Info{}, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return s.info(), nil
}

// List describes every vGPU, by name.
func (h *Host) List() []Info {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]Info, 0, len(h.vgpus))
	for _, s := range h.vgpus {
		out = append(out, s.info())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// VGPU returns a vGPU by name, for in-process callers (tests, the demo).
func (h *Host) VGPU(name string) (*vgpu.VGPU, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.vgpus[name]
	if !ok {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return s.v, nil
}

// Destroy stops serving a vGPU, drops its client, and frees its memory.
// A vGPU a migration holds (leaving or arriving) or a VM uses is refused
// with ErrBusy, saying why, and left as it is: its memory stays mapped for
// as long as the migration or the VM needs it.
func (h *Host) Destroy(name string) error {
	return h.destroyServed(name, nil)
}

// busyLocked says why vGPU s, listed as name, may not be destroyed by an
// operator now (nil: it may).
func (h *Host) busyLocked(name string, s *served) error {
	switch s.state {
	case stateMigrating:
		return fmt.Errorf("%w: %s is migrating to another host (or waits for its outcome); remove it once the migration ends", ErrBusy, name)
	case stateIncoming:
		return fmt.Errorf("%w: %s is arriving by migration; remove it once the migration ends", ErrBusy, name)
	}
	for _, r := range h.vms {
		if r.vgpu == name && r.state != vmLost && r.state != vmVGPULost {
			return fmt.Errorf("%w: VM %s uses %s (gmigd vm stop %s first)", ErrBusy, r.name, name, r.name)
		}
	}
	return nil
}

// unlistLocked takes vGPU name out of the list for its shutdown; the name
// stays taken until listDone.
func (h *Host) unlistLocked(name string) chan struct{} {
	delete(h.vgpus, name)
	done := make(chan struct{})
	h.destroying[name] = done
	return done
}

// listDone frees name once its vGPU's shutdown is done.
func (h *Host) listDone(name string, done chan struct{}) {
	h.mu.Lock()
	delete(h.destroying, name)
	h.mu.Unlock()
	close(done)
}

// destroyServed destroys vGPU name: s, if it still has the name (its
// holder's end: a migration's, a VM's), or, s nil, whichever vGPU has the
// name unless it is busy (ErrBusy, busyLocked).
func (h *Host) destroyServed(name string, s *served) error {
	h.mu.Lock()
	cur, ok := h.vgpus[name]
	if !ok || s != nil && cur != s {
		h.mu.Unlock()
		return fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	if s == nil {
		if err := h.busyLocked(name, cur); err != nil {
			h.mu.Unlock()
			return err
		}
	}
	done := h.unlistLocked(name)
	h.mu.Unlock()
	defer h.listDone(name, done)
	return h.shutdown(cur)
}

func (h *Host) shutdown(s *served) error {
	s.stop()
	serr := <-s.done
	removeOwn(s.socket, s.sockFI)
	err := s.native.Close() // ends any native migration, then closes the vGPU
	if serr != nil && !errors.Is(serr, context.Canceled) {
		h.log.Warn().Err(serr).Str("vgpu", s.v.Name()).Msg("vfio-user server ended with an error")
	}
	h.log.Info().Str("vgpu", s.v.Name()).Msg("vgpu destroyed")
	return err
}

// Close stops the VMs it started, destroys every vGPU and releases the
// pool.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	all, vms := h.vgpus, h.vms
	h.vgpus, h.vms = nil, nil
	h.mu.Unlock()
	var errs []error
	for _, r := range vms {
		r.close()
		if r.kind == KindQEMU && !r.adopted && r.qmpPath != "" && r.state != vmLost {
			h.forgetVMFiles(filepath.Dir(r.qmpPath)) // stopped with gmigd: not lost (a lost one stays reported)
		}
	}
	for _, s := range all {
		errs = append(errs, h.shutdown(s))
	}
	errs = append(errs, h.pool.Close())
	h.releaseGPU()
	errs = append(errs, h.lock.Close()) // the run directory is free for the next gmigd
	h.log.Info().Msg("host shut down")
	return errors.Join(errs...)
}
