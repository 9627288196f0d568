package hostd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/internal/vgpu"
	"github.com/gmig-dev/gmig/precopy"
)

// Defaults for Config.
const (
	DefaultPoolSize = 1 << 30
	DefaultRunDir   = "/run/gmig"
)

// Config sets up a Host.
type Config struct {
	PoolSize uint64 // bytes of graphics memory shared by all vGPUs
	RunDir   string // vfio-user sockets live here, one per vGPU: RunDir/NAME.sock
	Log      zerolog.Logger
	// OnHeartbeat, if set, sees every guest HEARTBEAT write of every vGPU
	// on this host, created or arrived by migration, stamped with this
	// host's clock: the largest gap between consecutive values is the
	// guest-observed downtime.
	OnHeartbeat func(vgpu string, value uint64, at time.Time)
}

// Sentinel errors callers branch on (the control API maps them to HTTP
// status codes).
var (
	ErrExists   = errors.New("hostd: vGPU already exists")
	ErrNotFound = errors.New("hostd: no such vGPU")
	ErrName     = errors.New("hostd: invalid vGPU name")
	ErrClosed   = errors.New("hostd: host is shut down")
)

// nameRE is what a vGPU name may be: it becomes a file name.
var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// Info describes one vGPU for listings.
type Info struct {
	Name       string     `json:"name"`
	Socket     string     `json:"socket"`
	MemSize    uint64     `json:"mem_size"`
	GTTEntries uint32     `json:"gtt_entries"`
	Backend    string     `json:"backend"` // software or cuda
	PoolOffset uint64     `json:"pool_offset"`
	Stats      vgpu.Stats `json:"stats"`
}

// Host owns the pool and the vGPUs of one gmigd.
type Host struct {
	cfg  Config
	log  zerolog.Logger
	pool *pool.Pool

	mu     sync.Mutex
	vgpus  map[string]*served
	closed bool
}

// served is a vGPU with its vfio-user listener and server goroutine.
type served struct {
	v         *vgpu.VGPU
	native    *precopy.Native // v with the vfio-user migration interface
	socket    string
	stop      context.CancelFunc
	done      chan error
	migrating bool // an outgoing migration holds it (Host.Migrate)
}

// New creates the pool and the run directory.
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
	p, err := pool.New(cfg.PoolSize)
	if err != nil {
		return nil, fmt.Errorf("hostd: creating %d-byte pool: %w", cfg.PoolSize, err)
	}
	h := &Host{cfg: cfg, log: cfg.Log, pool: p, vgpus: map[string]*served{}}
	h.log.Info().Uint64("pool_size", cfg.PoolSize).Str("run_dir", cfg.RunDir).Msg("host ready")
	return h, nil
}

// Pool returns the host's graphics-memory pool.
func (h *Host) Pool() *pool.Pool { return h.pool }

// Create makes a vGPU and starts serving it on RunDir/NAME.sock.
func (h *Host) Create(cfg vgpu.Config) (Info, error) {
	if !nameRE.MatchString(cfg.Name) {
		return Info{}, fmt.Errorf("%w: %q (want 1-32 of a-z 0-9 _ -, starting with a letter or digit)", ErrName, cfg.Name)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return Info{}, ErrClosed
	}
	if _, ok := h.vgpus[cfg.Name]; ok {
		return Info{}, fmt.Errorf("%w: %s", ErrExists, cfg.Name)
	}
	if hb := h.cfg.OnHeartbeat; hb != nil && cfg.OnHeartbeat == nil {
		name := cfg.Name
		cfg.OnHeartbeat = func(v uint64, at time.Time) { hb(name, v, at) }
	}
	v, err := vgpu.New(cfg, h.pool, h.log)
	if err != nil {
		return Info{}, err
	}
	s, err := h.serveLocked(v)
	if err != nil {
		_ = v.Close()
		return Info{}, err
	}
	h.vgpus[cfg.Name] = s
	return s.info(), nil
}

func (h *Host) serveLocked(v *vgpu.VGPU) (*served, error) {
	path := filepath.Join(h.cfg.RunDir, v.Name()+".sock")
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("hostd: listening on %s: %w", path, err)
	}
	// Served through precopy.Native: the vfio-user migration interface
	// (DEVICE_FEATURE, MIG_DATA_*) is there for a client that drives it.
	n, err := precopy.NewNative(v, precopy.Options{Log: h.log})
	if err != nil {
		_ = l.Close()
		return nil, err
	}
	ctx, stop := context.WithCancel(context.Background())
	s := &served{v: v, native: n, socket: path, stop: stop, done: make(chan error, 1)}
	go func() {
		err := v.ServeDevice(ctx, l, n)
		_ = l.Close()
		s.done <- err
	}()
	h.log.Info().Str("vgpu", v.Name()).Str("socket", path).Msg("vgpu serving")
	return s, nil
}

// removeStaleSocket deletes a socket file left by an earlier gmigd; any
// other kind of file at that path is an error.
func removeStaleSocket(path string) error {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("hostd: %w", err)
	case fi.Mode()&os.ModeSocket == 0:
		return fmt.Errorf("hostd: %s exists and is not a socket", path)
	}
	return os.Remove(path)
}

func (s *served) info() Info {
	c := s.v.Config()
	return Info{
		Name: c.Name, Socket: s.socket, MemSize: c.MemSize, GTTEntries: c.GTTEntries, Backend: c.Backend,
		PoolOffset: s.v.Partition().Offset, Stats: s.v.Stats(),
	}
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
func (h *Host) Destroy(name string) error {
	h.mu.Lock()
	s, ok := h.vgpus[name]
	delete(h.vgpus, name)
	h.mu.Unlock()
	if !ok {
		return fmt.Errorf("%w: %s", ErrNotFound, name)
	}
	return h.shutdown(s)
}

func (h *Host) shutdown(s *served) error {
	s.stop()
	serr := <-s.done
	_ = os.Remove(s.socket)
	err := s.native.Close() // ends any native migration, then closes the vGPU
	if serr != nil && !errors.Is(serr, context.Canceled) {
		h.log.Warn().Err(serr).Str("vgpu", s.v.Name()).Msg("vfio-user server ended with an error")
	}
	h.log.Info().Str("vgpu", s.v.Name()).Msg("vgpu destroyed")
	return err
}

// Close destroys every vGPU and releases the pool.
func (h *Host) Close() error {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil
	}
	h.closed = true
	all := h.vgpus
	h.vgpus = nil
	h.mu.Unlock()
	var errs []error
	for _, s := range all {
		errs = append(errs, h.shutdown(s))
	}
	errs = append(errs, h.pool.Close())
	h.log.Info().Msg("host shut down")
	return errors.Join(errs...)
}
