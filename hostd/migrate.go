package hostd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/gmig-dev/gmig/internal/vgpu"
	"github.com/gmig-dev/gmig/precopy"
)

// MigrateOptions steer one outgoing migration.
type MigrateOptions struct {
	Precopy precopy.Options
	// Pause stops the VM (QEMU's pre-switchover; the simulator's gate) and
	// returns once the guest can no longer touch the vGPU. Required.
	Pause func(ctx context.Context) error
	// Resume restarts the VM on this host after a failed migration.
	Resume func()
	// DialTimeout bounds connecting to the peer (default 10 s).
	DialTimeout time.Duration
}

// ErrMigrating reports a vGPU that is already being migrated.
var ErrMigrating = errors.New("hostd: vGPU is being migrated")

// Migrate moves vGPU name to the gmigd whose migration listener is at peer
// (host:port): pre-copy while the VM runs, then opts.Pause, the stop phase,
// and the destination's verdict. On success the vGPU is gone from this host
// (its socket removed, its memory zeroed and freed). On any failure it keeps
// running here with its memory untouched, opts.Resume is called if the VM
// was paused, and the error says what failed.
func (h *Host) Migrate(ctx context.Context, name, peer string, opts MigrateOptions) (precopy.Report, error) {
	if opts.Pause == nil {
		return precopy.Report{}, errors.New("hostd: Migrate needs a Pause hook")
	}
	s, err := h.claim(name)
	if err != nil {
		return precopy.Report{}, err
	}
	defer h.release(name)
	log := h.log.With().Str("vgpu", name).Str("peer", peer).Str("strategy", string(opts.Precopy.Strategy)).Logger()
	if opts.DialTimeout == 0 {
		opts.DialTimeout = 10 * time.Second
	}
	d := net.Dialer{Timeout: opts.DialTimeout}
	conn, err := d.DialContext(ctx, "tcp", peer)
	if err != nil {
		return precopy.Report{}, fmt.Errorf("hostd: migrating %s: %w", name, err)
	}
	defer conn.Close()
	opts.Precopy.Log = log
	src, err := precopy.NewSource(s.v, conn, opts.Precopy)
	if err != nil {
		return precopy.Report{}, fmt.Errorf("hostd: migrating %s: %w", name, err)
	}
	log.Info().Msg("migration: pre-copy")
	if err := src.Precopy(ctx); err != nil {
		src.Rollback()
		return precopy.Report{}, fmt.Errorf("hostd: migrating %s: pre-copy: %w", name, err)
	}
	if err := opts.Pause(ctx); err != nil {
		src.Rollback()
		return precopy.Report{}, fmt.Errorf("hostd: migrating %s: pausing the VM: %w", name, err)
	}
	rep, err := src.Stop(ctx)
	if err != nil {
		src.Rollback()
		if opts.Resume != nil {
			opts.Resume()
		}
		log.Warn().Err(err).Msg("migration failed; vGPU kept running here")
		return rep, fmt.Errorf("hostd: migrating %s: stop phase: %w", name, err)
	}
	src.Close()
	log.Info().Dur("stop", rep.Stop.Total).Int("dirty_pages", rep.Stop.DirtyPages).Msg("migration: done")
	if err := h.Destroy(name); err != nil {
		log.Warn().Err(err).Msg("destroying the migrated-away vGPU")
	}
	return rep, nil
}

// claim marks a vGPU as migrating, refusing a second migration of it.
func (h *Host) claim(name string) (*served, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	s, ok := h.vgpus[name]
	switch {
	case !ok:
		return nil, fmt.Errorf("%w: %s", ErrNotFound, name)
	case s.migrating:
		return nil, fmt.Errorf("%w: %s", ErrMigrating, name)
	}
	s.migrating = true
	return s, nil
}

func (h *Host) release(name string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if s, ok := h.vgpus[name]; ok {
		s.migrating = false
	}
}

// ListenMigrations opens the TCP listener incoming migrations arrive on.
func (h *Host) ListenMigrations(addr string) (net.Listener, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("hostd: migration listener: %w", err)
	}
	h.log.Info().Str("addr", l.Addr().String()).Msg("accepting migrations")
	return l, nil
}

// Incoming is called for each vGPU that arrived; the vGPU is quiesced and
// already served on its socket. Resume it (VGPU(name).Resume()) when its VM
// runs here.
type Incoming func(info Info, rep precopy.Report)

// ServeMigrations accepts incoming migrations on l, one at a time, until ctx
// ends. Each arriving vGPU gets a new partition of this host's pool (its
// host offset differs from the source's; the shadow GTT is rebuilt on it)
// and its vfio-user socket; done is told about it. A failed incoming
// migration leaves nothing behind here.
func (h *Host) ServeMigrations(ctx context.Context, l net.Listener, fe precopy.FrontEnd, done Incoming) error {
	go func() {
		<-ctx.Done()
		_ = l.Close()
	}()
	for {
		conn, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("hostd: accepting a migration: %w", err)
		}
		h.receive(ctx, conn, fe, done)
	}
}

func (h *Host) receive(ctx context.Context, conn net.Conn, fe precopy.FrontEnd, done Incoming) {
	defer conn.Close()
	log := h.log.With().Str("peer", conn.RemoteAddr().String()).Logger()
	var info Info
	// The vGPU is named and served before the success verdict goes out: a
	// clash of names refuses the migration while the source still runs.
	var name atomic.Pointer[string]
	adopt := func(v *vgpu.VGPU) (err error) {
		n := v.Name()
		name.Store(&n)
		info, err = h.adopt(v)
		return err
	}
	var cfg vgpu.Config
	if hb := h.cfg.OnHeartbeat; hb != nil {
		// The name arrives with the stream; heartbeats only once adopted.
		cfg.OnHeartbeat = func(v uint64, at time.Time) {
			if n := name.Load(); n != nil {
				hb(*n, v, at)
			}
		}
	}
	_, rep, err := precopy.ReceiveAdopt(ctx, conn, vgpu.RestoreArgs{Config: cfg, Pool: h.pool, Log: h.log}, fe, adopt)
	if err != nil {
		if info.Name != "" {
			// Adopted, but the verdict did not get out: drop it again.
			_ = h.Destroy(info.Name)
		}
		log.Warn().Err(err).Msg("incoming migration failed; nothing kept")
		return
	}
	log.Info().Str("vgpu", info.Name).Uint64("pool_offset", info.PoolOffset).Msg("incoming migration: vGPU arrived")
	if done != nil {
		done(info, rep)
	}
}

// adopt registers and serves a vGPU built elsewhere (an incoming migration).
func (h *Host) adopt(v *vgpu.VGPU) (Info, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return Info{}, ErrClosed
	}
	if _, ok := h.vgpus[v.Name()]; ok {
		return Info{}, fmt.Errorf("%w: %s", ErrExists, v.Name())
	}
	s, err := h.serveLocked(v)
	if err != nil {
		return Info{}, err
	}
	h.vgpus[v.Name()] = s
	return s.info(), nil
}
