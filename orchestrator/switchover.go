package orchestrator

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// The VMM's switchover runs beside the vGPU's stop phase: it starts as
// soon as the vGPU is quiesced (precopy.Options.Quiesced), when the VM is
// paused and the device writes no more guest RAM, so the VMM's remaining
// RAM and device state are final. The commit still waits for both the
// destination's verdict and the completed switchover (doc.go, "One live
// copy at every instant").

// switchover is one run of SourceVM.Switchover on a goroutine of its own.
type switchover struct {
	vm SourceVM
	// ctx is the switchover's: cancelled by abandon. stopPhase is
	// cancelled, with the switchover's error, when the switchover fails:
	// the stop phase beside it is then pointless.
	ctx        context.Context
	cancel     context.CancelFunc
	failStop   context.CancelCauseFunc
	once       sync.Once
	done       chan struct{}
	start, end time.Time
	err        error // set before done is closed
}

// newSwitchover prepares a switchover under ctx; failStop is called with
// its error if it fails.
func newSwitchover(ctx context.Context, vm SourceVM, failStop context.CancelCauseFunc) *switchover {
	sctx, cancel := context.WithCancel(ctx)
	return &switchover{vm: vm, ctx: sctx, cancel: cancel, failStop: failStop, done: make(chan struct{})}
}

// begin starts the switchover; later calls do nothing.
func (s *switchover) begin() {
	s.once.Do(func() {
		s.start = time.Now()
		go func() {
			err := s.vm.Switchover(s.ctx)
			s.end = time.Now()
			if err != nil {
				s.err = fmt.Errorf("the VMM's switchover: %w", err)
				if s.ctx.Err() == nil { // not ended by abandon or the migration's end
					s.failStop(s.err)
				}
			}
			close(s.done)
		}()
	})
}

// wait starts the switchover if it has not started and returns its error
// once it has ended.
func (s *switchover) wait() error {
	s.begin()
	<-s.done
	return s.err
}

// abandon ends a switchover the migration no longer needs (the stop phase
// failed): its context is cancelled and, if it started, abandon waits for
// it to return, so that the rollback finds the VMM with no switchover of
// ours in flight (a VMM whose switchover went on or even completed is
// SourceVM.Resume's to handle). It returns the switchover's error.
func (s *switchover) abandon() error {
	s.cancel()
	s.once.Do(func() { close(s.done) }) // not started: it never will
	<-s.done
	return s.err
}

// release frees the switchover's context once it has ended.
func (s *switchover) release() { s.cancel() }
