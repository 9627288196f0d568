package hostd

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gmig-dev/gmig/internal/apilog"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/orchestrator"
)

// The simulated VM as the migration orchestrator drives it. Its RAM is a
// memfd that both "hosts" of one process share, so the VMM migration is
// empty: the source pauses the guest, the destination re-attaches it to
// the arrived vGPU (Move: what a destination QEMU's vfio-user front end
// does once its config is restored) and resumes it.

// simSource is the simulated VM at a migration's source.
type simSource struct {
	VM *sim.VM
	// Held, if set, is a HoldAt's channel: the VM pauses only once the
	// workload waits at that fixed point (benchmarks stop every strategy
	// at the same operation); otherwise at the next operation boundary.
	Held <-chan struct{}

	mu     sync.Mutex
	pause  chan struct{} // closed when the pause has happened (or failed)
	at     time.Time
	err    error
	paused bool
}

var _ orchestrator.SourceVM = (*simSource)(nil)

// Migrate starts pausing the guest (there is no RAM to move).
func (s *simSource) Migrate(ctx context.Context, _ string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pause != nil {
		return errors.New("hostd: simulated VM: migration already started")
	}
	s.pause = make(chan struct{})
	go func() {
		var err error
		if s.Held != nil {
			select {
			case <-s.Held:
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		if err == nil {
			err = s.VM.Pause(ctx)
		}
		s.mu.Lock()
		s.at, s.err, s.paused = time.Now(), err, err == nil
		close(s.pause)
		s.mu.Unlock()
	}()
	return nil
}

// WaitPaused returns the time the guest's workload and heartbeat had both
// stopped.
func (s *simSource) WaitPaused(ctx context.Context) (time.Time, error) {
	s.mu.Lock()
	ch := s.pause
	s.mu.Unlock()
	if ch == nil {
		return time.Time{}, errors.New("hostd: simulated VM: WaitPaused before Migrate")
	}
	select {
	case <-ch:
	case <-ctx.Done():
		return time.Time{}, ctx.Err()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.at, s.err
}

// Switchover has nothing to move: guest RAM is shared.
func (s *simSource) Switchover(context.Context) error { return nil }

// Progress is empty: no VMM migration.
func (s *simSource) Progress() orchestrator.VMMProgress { return orchestrator.VMMProgress{} }

// Resume lets the guest go on here.
func (s *simSource) Resume(context.Context) error {
	s.VM.Resume()
	return nil
}

// Release does nothing: the same VM object runs on at the destination.
func (s *simSource) Release(context.Context) error { return nil }

// simDest is the simulated VM at a migration's destination: the same VM,
// re-attached to the arrived vGPU's socket.
type simDest struct {
	VM     *sim.VM
	Socket string // the arrived vGPU's vfio-user socket
}

var _ orchestrator.DestVM = (*simDest)(nil)

// Incoming is empty: no VMM migration.
func (d *simDest) Incoming() string { return "" }

// WaitLoaded returns at once: guest RAM is shared.
func (d *simDest) WaitLoaded(context.Context) error { return nil }

// RestoreFrontEnd re-attaches the guest to the arrived vGPU, keeping its
// RAM, and rebinds its driver: the simulator's front end programs the
// device itself, as a destination QEMU's does once its config is restored.
func (d *simDest) RestoreFrontEnd(context.Context, []apilog.Entry) error { return d.VM.Move(d.Socket) }

// Resume lets the guest go on here.
func (d *simDest) Resume(context.Context) (time.Time, error) {
	at := time.Now()
	d.VM.Resume()
	return at, nil
}
