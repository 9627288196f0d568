package orchestrator

import (
	"context"
	"errors"
	"testing"
)

// Cancel (Control.Cancel) in every phase before the commit rolls back:
// the VM runs on at the source, the destination discards what it built
// and its pool is empty; after the commit point it is refused.

// jobCell is one cancel of the table: setup plans it, given the
// migration's Control.
type jobCell struct {
	name  string
	setup func(e *env, ctl *Control, cancelled chan<- error)
	want  want
}

// cancelNow is the cue of a cell: the owner cancels here.
func cancelNow(ctl *Control, cancelled chan<- error) { cancelled <- ctl.Cancel("operator") }

func jobCells() []jobCell {
	rolledBack := func(text string) want {
		return want{err: ErrRolledBack, is: ErrCancelled, text: text, live: liveSource, cleanup: cleanDiscarded}
	}
	return []jobCell{{
		name: "prepare (the destination has landed, its ready not yet sent)",
		setup: func(e *env, ctl *Control, c chan<- error) {
			e.net.add(&fault{side: atDest, kind: kindMigrate, when: isReady, act: actPass, first: func() { cancelNow(ctl, c) }})
		},
		want: rolledBack("prepare"),
	}, {
		name: "vGPU pre-copy (64 KiB of the stream sent)",
		setup: func(e *env, ctl *Control, c chan<- error) {
			e.net.add(&fault{side: atSource, kind: kindData, act: actPass, first: func() { cancelNow(ctl, c) },
				when: func(at int64, p []byte) bool { return at+int64(len(p)) > 64<<10 }})
		},
		want: rolledBack("pre-copy"),
	}, {
		name:  "VMM pre-copy",
		setup: func(e *env, ctl *Control, c chan<- error) { e.vm.onMigrate = func() { cancelNow(ctl, c) } },
		want:  rolledBack("pre-copy"),
	}, {
		name:  "pause (the VM just paused)",
		setup: func(e *env, ctl *Control, c chan<- error) { e.vm.onPaused = func() { cancelNow(ctl, c) } },
		want:  rolledBack("stop phase"),
	}, {
		name: "stop-phase transfer (the dirty pages going out)",
		setup: func(e *env, ctl *Control, c chan<- error) {
			e.net.add(&fault{side: atSource, kind: kindData, act: actPass, first: func() { cancelNow(ctl, c) }, when: e.whilePaused})
		},
		want: rolledBack("stop phase"),
	}, {
		name: "verdict (the destination restored the vGPU, its verdict on its way)",
		setup: func(e *env, ctl *Control, c chan<- error) {
			e.net.add(&fault{side: atDest, kind: kindData, act: actPass, first: func() { cancelNow(ctl, c) }})
		},
		want: rolledBack("stop phase"),
	}, {
		name: "VMM switchover (held until the cancel ends it)",
		setup: func(e *env, ctl *Control, c chan<- error) {
			e.vm.switchover = func(ctx context.Context) error {
				if err := e.afterStop(ctx); err != nil {
					return err
				}
				cancelNow(ctl, c)
				<-ctx.Done()
				return ctx.Err()
			}
		},
		want: rolledBack("VMM switchover"),
	}, {
		name: "VMM switchover (it completes; the cancel came during it)",
		setup: func(e *env, ctl *Control, c chan<- error) {
			e.vm.switchover = func(ctx context.Context) error {
				if err := e.afterStop(ctx); err != nil {
					return err
				}
				cancelNow(ctl, c)
				return nil
			}
		},
		want: rolledBack("VMM switchover"),
	}, {
		name: "VMM switchover beside the stop phase (held until the cancel ends both)",
		setup: func(e *env, ctl *Control, c chan<- error) {
			e.vm.switchover = func(ctx context.Context) error {
				cancelNow(ctl, c)
				<-ctx.Done()
				return ctx.Err()
			}
		},
		// Whichever of the two notices the cancel first names it.
		want: rolledBack("operator"),
	}}
}

func TestCancelBeforeCommitRollsBack(t *testing.T) {
	for _, c := range jobCells() {
		t.Run(c.name, func(t *testing.T) {
			e := newEnv(t, Timeouts{})
			ctl := NewControl(0)
			cancelled := make(chan error, 1)
			c.setup(e, ctl, cancelled)
			e.start()
			s := e.source(Timeouts{})
			s.Control = ctl
			rep, err := e.migrate(t, s)
			select {
			case cerr := <-cancelled:
				if cerr != nil {
					t.Fatalf("Cancel: %v", cerr)
				}
			default:
				t.Fatal("the cell's cue never came: nothing was cancelled")
			}
			checkErr(t, c.want, err)
			if rep.ID != ctl.ID() {
				t.Errorf("report ID %q, the Control's %q", rep.ID, ctl.ID())
			}
			if a := e.waitArrival(t); a.Err == nil {
				t.Error("the destination says the VM arrived")
			}
			checkPhases(t, e, rep, err)
			live := checkLive(t, e, c.want.live)
			if got := checkCleanup(t, e, live); got != c.want.cleanup {
				t.Errorf("cleanup %q, want %q", got, c.want.cleanup)
			}
			if parts := e.dstPool.Partitions(); len(parts) != 0 {
				t.Errorf("the destination's pool still holds %v", parts)
			}
			checkMemory(t, e, live)
			checkRuns(t, e, live)
			if err := ctl.Cancel("again"); !errors.Is(err, ErrFinished) {
				t.Errorf("Cancel after the end: %v, want ErrFinished", err)
			}
		})
	}
}

func TestCancelAfterCommitRefused(t *testing.T) {
	e := newEnv(t, Timeouts{})
	ctl := NewControl(0)
	cancelled := make(chan error, 1)
	e.net.add(&fault{side: atSource, kind: kindMigrate, when: isCommit, act: actPass, first: func() { cancelNow(ctl, cancelled) }})
	e.start()
	s := e.source(Timeouts{})
	s.Control = ctl
	rep, err := e.migrate(t, s)
	if err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	if cerr := <-cancelled; !errors.Is(cerr, ErrCommitted) {
		t.Errorf("Cancel at the commit: %v, want ErrCommitted", cerr)
	}
	e.waitArrival(t)
	checkPhases(t, e, rep, err)
	live := checkLive(t, e, liveDest)
	checkCleanup(t, e, live)
}

func TestCancelBeforeStartRollsBackAtOnce(t *testing.T) {
	e := newEnv(t, Timeouts{})
	e.start()
	ctl := NewControl(0)
	if err := ctl.Cancel("changed my mind"); err != nil {
		t.Fatal(err)
	}
	s := e.source(Timeouts{})
	s.Control = ctl
	_, err := e.migrate(t, s)
	checkErr(t, want{err: ErrRolledBack, is: ErrCancelled, text: "changed my mind"}, err)
	if n := e.host().Lands(); n != 0 {
		t.Errorf("the destination landed %d migrations of a cancelled one", n)
	}
}

// The commit point is where a cancel turns into a refusal: a cancel that
// came first wins, one after it is refused.
func TestControlCommitPoint(t *testing.T) {
	ctl := NewControl(0)
	jctx, end := ctl.bind(context.Background())
	if err := ctl.Cancel("first"); err != nil {
		t.Fatal(err)
	}
	if err := ctl.commitPoint(jctx); !errors.Is(err, ErrCancelled) {
		t.Errorf("commit point after a cancel: %v, want ErrCancelled", err)
	}
	end()

	ctl = NewControl(0)
	jctx, end = ctl.bind(context.Background())
	defer end()
	if err := ctl.commitPoint(jctx); err != nil {
		t.Fatalf("commit point: %v", err)
	}
	if err := ctl.Cancel("late"); !errors.Is(err, ErrCommitted) {
		t.Errorf("Cancel after the commit point: %v, want ErrCommitted", err)
	}
	if jctx.Err() != nil {
		t.Error("a refused cancel ended the migration's context")
	}
}
