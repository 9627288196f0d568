package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// Errors of a migration's Control.
var (
	// ErrCancelled is wrapped in the rollback of a migration its owner
	// cancelled (Control.Cancel) before the commit.
	ErrCancelled = errors.New("orchestrator: migration cancelled")
	// ErrCommitted refuses a cancel that came after the commit point: the
	// source has told (or is telling) the destination to run the VM, and
	// only the destination's answer ends the migration now.
	ErrCommitted = errors.New("orchestrator: the migration is committed")
	// ErrFinished refuses a cancel of a migration that has ended.
	ErrFinished = errors.New("orchestrator: the migration has ended")
)

// Control is an outgoing migration's handle for its owner while it runs
// (gmigd's table of migrations): cancel it before the commit, change its
// bandwidth, read its stop-phase estimate. Make one with NewControl, give
// it to one Migrate (Source.Control); its methods may be called from any
// goroutine, before, during and after that Migrate.
type Control struct {
	id    string
	limit *Limiter

	mu        sync.Mutex
	cancel    context.CancelCauseFunc // the running migration's, once bound
	cancelled error                   // a cancel that came before Migrate bound it
	committed bool
	ended     bool
	estimate  *Estimate
}

// NewControl returns a Control for one migration, its ID chosen now (the
// migration's ID, Report.ID), with a bandwidth limit of bandwidth bytes/s
// for the vGPU stream and the VMM's RAM together (0: none).
func NewControl(bandwidth uint64) *Control {
	return &Control{id: newID(), limit: NewLimiter(bandwidth)}
}

// ID is the migration's ID.
func (c *Control) ID() string { return c.id }

// Cancel stops the migration and rolls it back (the VM runs on at the
// source; the destination discards what it built), whatever phase it is
// in before the commit point. After that point it returns ErrCommitted,
// once the migration has ended ErrFinished, and it does nothing.
func (c *Control) Cancel(reason string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.ended:
		return ErrFinished
	case c.committed:
		return ErrCommitted
	}
	cause := fmt.Errorf("%w: %s", ErrCancelled, reason)
	if c.cancel != nil {
		c.cancel(cause)
	} else if c.cancelled == nil {
		c.cancelled = cause
	}
	return nil
}

// SetBandwidth changes the limit on the vGPU stream and the VMM's RAM
// together, in bytes/s (0: none), at once, also while it migrates.
func (c *Control) SetBandwidth(bytesPerSec uint64) { c.limit.SetRate(bytesPerSec) }

// Bandwidth is the limit now, in bytes/s (0: none).
func (c *Control) Bandwidth() uint64 { return c.limit.Rate() }

// Estimate is the last stop-phase estimate (ok false: none yet; only a
// migration with a downtime bound, Source.MaxDowntime, estimates).
func (c *Control) Estimate() (e Estimate, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.estimate == nil {
		return Estimate{}, false
	}
	return *c.estimate, true
}

func (c *Control) setEstimate(e Estimate) {
	c.mu.Lock()
	c.estimate = &e
	c.mu.Unlock()
}

// bind returns the context the migration's phases up to the commit run
// under: ctx, cancelled by Cancel. end unbinds it once Migrate returns.
func (c *Control) bind(ctx context.Context) (jctx context.Context, end func()) {
	jctx, cancel := context.WithCancelCause(ctx)
	c.mu.Lock()
	c.cancel = cancel
	if c.cancelled != nil {
		cancel(c.cancelled)
	}
	c.mu.Unlock()
	return jctx, func() {
		c.mu.Lock()
		c.ended = true
		c.mu.Unlock()
		cancel(nil)
	}
}

// commitPoint passes the commit point: from here on Cancel is refused. A
// cancel that came first is returned: the migration rolls back instead.
func (c *Control) commitPoint(jctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cause := context.Cause(jctx); errors.Is(cause, ErrCancelled) {
		return cause
	}
	c.committed = true
	return nil
}

// cancelCause names the owner's cancel (Control.Cancel) in err when that
// is what ended a phase, which itself saw only its context cancelled.
func cancelCause(jctx context.Context, err error) error {
	if cause := context.Cause(jctx); errors.Is(cause, ErrCancelled) && !errors.Is(err, ErrCancelled) {
		return fmt.Errorf("%w (%w)", cause, err)
	}
	return err
}
