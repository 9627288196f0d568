package hostd

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gmig-dev/gmig/hostd/qemu"
	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/precopy"
	"github.com/gmig-dev/gmig/vgpu"
)

// MigrateOptions steer one outgoing migration.
type MigrateOptions struct {
	Precopy precopy.Options
	// Progress, if set, receives snapshots while the migration runs.
	Progress func(orchestrator.Progress)
	// MaxBandwidth and DowntimeLimit are QEMU's RAM migration parameters
	// (zero: qemu.DefaultMaxBandwidth and QEMU's own 300 ms).
	MaxBandwidth  uint64
	DowntimeLimit time.Duration
	// Bandwidth limits the vGPU stream and QEMU's RAM together, in
	// bytes/s (0: none); SetJobBandwidth changes it while it runs.
	Bandwidth uint64
	// MaxDowntime, if positive, bounds the estimated stop phase: the
	// migration pre-copies more, or rolls back, rather than exceed it
	// (orchestrator.Source.MaxDowntime).
	MaxDowntime time.Duration
	// NoTracking leaves Precopy.GuestWrites unset: no log of the guest's
	// aperture writes, the stop phase hashes every page.
	NoTracking bool
}

// MigrateVM moves VM name and its vGPU to the gmigd whose migration
// listener is at peer (host:port), through the orchestrator. On success
// the VM runs there and is gone from here (its vGPU destroyed). On an error
// wrapping orchestrator.ErrRolledBack the VM runs on here; on
// orchestrator.ErrNotResumed its QEMU did not resume it (the listing says
// exited when the QEMU has ended). On
// orchestrator.ErrOutcomeUnknown it stays paused here (state
// outcome-unknown) while gmigd keeps asking the destination; it is then
// released or resumed by itself.
func (h *Host) MigrateVM(ctx context.Context, name, peer string, opts MigrateOptions) (orchestrator.Report, error) {
	r, s, err := h.claimVM(name)
	if err != nil {
		return orchestrator.Report{}, err
	}
	vm, kind, spec, err := h.outgoingVM(r, peer, opts)
	if err != nil {
		h.releaseVM(name, vmRunning)
		return orchestrator.Report{}, err
	}
	if !opts.NoTracking && opts.Precopy.GuestWrites == nil {
		opts.Precopy.GuestWrites = guestWrites(r.writerPID(), h.log.With().Str("vm", name).Logger())
	}
	h.metrics.migrationStarted("source")
	if opts.Precopy.Streams == 0 {
		opts.Precopy.Streams = h.cfg.Streams
	}
	phases := h.metrics.trackPhases()
	ctl := orchestrator.NewControl(opts.Bandwidth)
	job := h.jobs.start(Job{VM: name, Peer: peer, Strategy: string(cmp.Or(opts.Precopy.Strategy, precopy.OneShot)),
		MaxDowntime: opts.MaxDowntime}, ctl)
	rep, err := orchestrator.Migrate(ctx, orchestrator.Source{
		VGPU: s.v, VM: vm, Beats: s.beats, Peer: peer, Transport: h.cfg.Transport,
		VMKind: kind, VMSpec: spec, Name: r.vgpu,
		Precopy: opts.Precopy, Timeouts: h.cfg.Timeouts,
		Progress: phases.progress(func(p orchestrator.Progress) {
			h.jobs.progress(job, p)
			if opts.Progress != nil {
				opts.Progress(p)
			}
		}),
		OnResolved: func(runsThere bool) {
			h.jobs.resolved(ctl.ID(), runsThere)
			h.resolved(name, runsThere)
		},
		Control: ctl, MaxDowntime: opts.MaxDowntime,
		Log: h.log.With().Str("vm", name).Logger(),
	})
	phases.end()
	h.jobs.end(job, rep, err)
	switch {
	case err == nil:
		h.metrics.migrationEnded("source", rep, nil)
		h.forgetVM(name)
	case errors.Is(err, orchestrator.ErrOutcomeUnknown):
		h.metrics.migrationEnded("source", rep, err)
		h.releaseVM(name, vmOutcomeUnknown)
	default:
		h.metrics.migrationEnded("source", rep, err)
		h.releaseVM(name, vmRunning)
	}
	return rep, err
}

// claimVM marks a running VM and its vGPU as migrating.
func (h *Host) claimVM(name string) (*vmRec, *served, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r, ok := h.vms[name]
	if !ok {
		return nil, nil, fmt.Errorf("%w: %s", ErrNoVM, name)
	}
	if st := r.stateNow(); st != vmRunning {
		return nil, nil, fmt.Errorf("%w: %s is %s", ErrVMState, name, st)
	}
	s, ok := h.vgpus[r.vgpu]
	if !ok {
		return nil, nil, fmt.Errorf("%w: %s (the vGPU of VM %s)", ErrNotFound, r.vgpu, name)
	}
	r.state, s.state = vmMigrating, stateMigrating
	return r, s, nil
}

// releaseVM ends a migration that left the VM here.
func (h *Host) releaseVM(name, state string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if r, ok := h.vms[name]; ok {
		r.state = state
		if s, ok := h.vgpus[r.vgpu]; ok {
			s.state = stateLive
			if state != vmRunning {
				s.state = stateMigrating
			}
		}
	}
}

// forgetVM drops a VM that now runs at the destination, and its vGPU.
func (h *Host) forgetVM(name string) {
	h.mu.Lock()
	r, ok := h.vms[name]
	delete(h.vms, name)
	var s *served // the vGPU the migration held: its end destroys it
	if ok {
		s = h.vgpus[r.vgpu]
	}
	h.mu.Unlock()
	if !ok {
		return
	}
	if r.console != nil {
		r.console.Close()
	}
	if r.kind == KindQEMU && !r.adopted && r.qmpPath != "" {
		h.forgetVMFiles(filepath.Dir(r.qmpPath)) // its QEMU quit: the VM runs at the destination
	}
	if s == nil {
		return
	}
	if err := h.destroyServed(r.vgpu, s); err != nil {
		h.log.Warn().Err(err).Str("vgpu", r.vgpu).Msg("destroying the migrated vGPU")
	}
}

// resolved ends an outcome-unknown migration once the destination answered.
func (h *Host) resolved(name string, runsThere bool) {
	if runsThere {
		h.forgetVM(name)
		return
	}
	h.releaseVM(name, vmRunning)
}

// ListenMigrations opens the listener incoming migrations arrive on.
func (h *Host) ListenMigrations(addr string) (net.Listener, error) {
	t := h.cfg.Transport
	if t == nil {
		t = orchestrator.TCP{}
	}
	l, err := t.Listen(addr)
	if err != nil {
		return nil, fmt.Errorf("hostd: migration listener: %w", err)
	}
	h.log.Info().Str("addr", l.Addr().String()).Msg("accepting migrations")
	return l, nil
}

// ServeMigrations accepts incoming migrations on l until ctx ends. Each
// arriving vGPU gets a new partition of this host's pool (its host offset
// differs from the source's; the shadow GTT is rebuilt on it) and its
// vfio-user socket; its VM is started here paused (QEMU with -incoming) and
// runs once the source commits. A failed incoming migration leaves nothing
// behind. onArrival, if set, is told each arrival's end.
func (h *Host) ServeMigrations(ctx context.Context, l net.Listener, onArrival func(orchestrator.Arrival)) error {
	d := orchestrator.NewDestination(h, orchestrator.DestinationOptions{
		Timeouts: h.cfg.Timeouts, Log: h.log, Outcomes: h.outcomes(), Streams: h.cfg.Streams,
		OnArrival: func(a orchestrator.Arrival) {
			h.metrics.migrationEnded("destination", orchestrator.Report{}, a.Err)
			if onArrival != nil {
				onArrival(a)
			}
		},
	})
	return d.Serve(ctx, l)
}

// outcomes is where this host keeps its incoming migrations' outcomes.
func (h *Host) outcomes() orchestrator.FileOutcomes {
	return orchestrator.FileOutcomes{Dir: filepath.Join(h.cfg.RunDir, "migrations")}
}

// recoverMigrations ends the incoming migrations an earlier gmigd left
// pending when it stopped: their QEMU waits paused for a commit that will
// never come (it never ran the VM); it is killed and the migration
// recorded as aborted, which is what the source hears if it asks.
func (h *Host) recoverMigrations() {
	store := h.outcomes()
	for id, o := range store.Pending() {
		if o.PID > 0 && isOurQEMU(o.PID, h.cfg.RunDir) {
			if err := syscall.Kill(o.PID, syscall.SIGKILL); err == nil {
				h.log.Warn().Str("migration", id).Int("pid", o.PID).Msg("ended the QEMU of an incoming migration left pending")
				h.waitGone(o.PID, 5*time.Second) // before recoverVMs looks for live ones
			}
		}
		if err := store.Save(id, orchestrator.Outcome{State: "aborted", At: time.Now()}); err != nil {
			h.log.Error().Err(err).Str("migration", id).Msg("recording a pending migration as aborted")
		}
	}
}

// isOurQEMU reports whether pid is a QEMU whose command line names a path
// in runDir (its QMP socket there).
func isOurQEMU(pid int, runDir string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	cmd := string(b)
	return strings.Contains(cmd, "qemu-system") && strings.Contains(cmd, filepath.Join(runDir, "vms")+"/")
}

// Land implements orchestrator.Host: the arriving vGPU, created in state
// incoming, and its VM, started paused.
func (h *Host) Land(ctx context.Context, p orchestrator.Prepare, via net.Addr) (orchestrator.Landing, error) {
	h.metrics.migrationStarted("destination")
	name := p.Name
	// The peer's name becomes this host's socket and VM directory names:
	// checked before anything is taken or made.
	if err := CheckName(name); err != nil {
		return nil, err
	}
	cfg, err := p.VGPU.Config(name)
	if err != nil {
		return nil, fmt.Errorf("hostd: the arriving vGPU: %w", err)
	}
	// A name whose last landing is still being discarded (a migration
	// retried at once) is taken once that is done.
	h.lockName(name)
	if _, ok := h.vms[name]; ok {
		h.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", ErrVMExists, name)
	}
	s, err := h.createLocked(cfg, stateIncoming)
	h.mu.Unlock()
	if err != nil {
		return nil, err
	}
	s.v.Quiesce() // nothing runs on it until the source commits
	l := &landing{h: h, s: s, name: name}
	if err := l.startVM(ctx, p, via); err != nil {
		l.Discard()
		return nil, err
	}
	return l, nil
}

// landing is an arriving vGPU and VM.
type landing struct {
	h    *Host
	s    *served
	name string
	vm   orchestrator.DestVM
	rec  *vmRec
}

func (l *landing) startVM(ctx context.Context, p orchestrator.Prepare, via net.Addr) error {
	switch p.VMKind {
	case KindQEMU:
		var spec qemu.Spec
		if err := json.Unmarshal(p.VM, &spec); err != nil {
			return fmt.Errorf("hostd: the source's QEMU spec: %w", err)
		}
		if err := l.h.cfg.QEMURoot.Check(); err != nil {
			return err
		}
		r, err := l.h.launch(ctx, l.name, spec, l.s.socket, true)
		if err != nil {
			return err
		}
		if err := os.WriteFile(incomingMark(filepath.Dir(r.qmpPath)), nil, 0o640); err != nil {
			r.close()
			return fmt.Errorf("hostd: marking the VM incoming: %w", err)
		}
		l.rec = r
		creds, err := l.h.qemuTLS("")
		if err != nil {
			return err
		}
		in := &qemu.Incoming{VM: r.q, TLS: creds}
		host, _, err := net.SplitHostPort(via.String())
		if err != nil {
			return fmt.Errorf("hostd: local address %s: %w", via, err)
		}
		if err := in.Listen(host); err != nil {
			return err
		}
		l.vm = in
	case KindSim:
		var simName string
		if err := json.Unmarshal(p.VM, &simName); err != nil {
			return fmt.Errorf("hostd: the source's sim spec: %w", err)
		}
		if l.h.cfg.Sims == nil {
			return errors.New("hostd: this gmigd takes no simulated VMs")
		}
		vm, ok := l.h.cfg.Sims.Get(simName)
		if !ok {
			return fmt.Errorf("hostd: no simulated VM %q in this process", simName)
		}
		l.rec = &vmRec{name: l.name, kind: KindSim, vgpu: l.name, ownsVGPU: true, sim: vm}
		l.vm = &simDest{VM: vm, Socket: l.s.socket}
	default:
		return fmt.Errorf("hostd: VM kind %q: want %s or %s", p.VMKind, KindQEMU, KindSim)
	}
	return nil
}

func (l *landing) VGPU() *vgpu.VGPU                { return l.s.v }
func (l *landing) VM() orchestrator.DestVM         { return l.vm }
func (l *landing) Beats() *orchestrator.Heartbeats { return l.s.beats }

// Commit makes the vGPU live and the VM this host's.
func (l *landing) Commit() {
	l.h.mu.Lock()
	defer l.h.mu.Unlock()
	l.s.state = stateLive
	l.rec.state = vmRunning
	l.h.vms[l.name] = l.rec
	l.h.watchExit(l.rec)
	if l.rec.qmpPath != "" {
		_ = os.Remove(incomingMark(filepath.Dir(l.rec.qmpPath)))
	}
}

// Discard stops the VM and destroys the vGPU.
func (l *landing) Discard() {
	if l.rec != nil && l.rec.q != nil {
		l.rec.q.Kill()
		if l.rec.console != nil {
			l.rec.console.Close()
		}
		l.h.forgetVMFiles(filepath.Dir(l.rec.qmpPath))
	}
	// This landing's vGPU only: the name may already be another's.
	if err := l.h.destroyServed(l.name, l.s); err != nil && !errors.Is(err, ErrNotFound) {
		l.h.log.Warn().Err(err).Str("vgpu", l.name).Msg("discarding an arriving vGPU")
	}
}
