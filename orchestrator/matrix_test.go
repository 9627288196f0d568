package orchestrator

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/precopy"
	"github.com/gmig-dev/gmig/precopy/stream"
)

// The protocol's failure matrix (doc.go, "One live copy at every
// instant"): each cell breaks one thing at one point of the sequence and
// checks where the VM ends up running — exactly one live copy — and that
// the other side let go of it.

// Where the VM runs at the end of a cell.
const (
	liveSource = "source"
	liveDest   = "destination"
	liveNone   = "nowhere" // the source's VMM could not resume it (ErrNotResumed)
)

// What the side that lost the VM did.
const (
	cleanUnreached = "nothing reached the destination"
	cleanNotLanded = "nothing landed"
	cleanDiscarded = "destination discarded"
	cleanReleased  = "source released"
)

// cell is one failure of the matrix.
type cell struct {
	name string
	// setup breaks things before the migration: the VMs, the hosts, the
	// network.
	setup    func(e *env)
	src, dst Timeouts // over testTimeouts
	streams  int      // the vGPU stop phase's streams (0: the default)
	// resolve runs after Migrate returned ErrOutcomeUnknown: it checks
	// the paused source and lets the destination answer.
	resolve func(t *testing.T, e *env)
	// check checks more, before the generic checks touch the vGPUs.
	check func(t *testing.T, e *env, rep Report)
	want  want
}

type want struct {
	err     error  // nil, ErrRolledBack, ErrNotResumed or ErrOutcomeUnknown
	is      error  // another error the result wraps (nil: none)
	text    string // in the error's text ("": anything)
	live    string // liveSource, liveDest or liveNone
	cleanup string // clean...
}

// whilePaused matches the writes made while the source VM is paused: the
// stop phase's.
func (e *env) whilePaused(int64, []byte) bool { return e.vm.State() == vmPaused }

// waitFor waits for ch (a cue inside a fake), or for ctx (nil: none),
// then returns ctx's error.
func waitFor(ctx context.Context, ch <-chan struct{}) error {
	var done <-chan struct{}
	if ctx != nil {
		done = ctx.Done()
	}
	select {
	case <-ch:
	case <-done:
	case <-time.After(guard):
		return fmt.Errorf("cue not seen in %v", guard)
	}
	if ctx != nil {
		return ctx.Err()
	}
	return nil
}

var errKilled = errors.New("fake VMM: killed with its gmigd")

// otherMigration rewrites a hello to name another migration.
func otherMigration(p []byte) []byte {
	var h hello
	if len(p) < 4 || json.Unmarshal(p[4:], &h) != nil {
		return p
	}
	h.ID = "0123456789abcdef"
	var b bytes.Buffer
	_ = writeMsg(&b, h)
	return b.Bytes()
}

// restartAnswers restarts the killed destination on its address, a new
// instance that never heard of the migration, and expects the source to
// roll back on its answer ("unknown").
func restartAnswers(t *testing.T, e *env) {
	e.checkPaused(t)
	for _, l := range e.landings() {
		if l.Live() {
			t.Error("the destination runs the VM it was killed with")
		}
	}
	e.startDest(e.addr, &fakeHost{pool: e.dstPool})
	if e.waitResolved(t) {
		t.Error("OnResolved(true) from a destination that never heard of the migration")
	}
}

func faultCells() []cell {
	slow := 300 * time.Millisecond // a timeout a cell means to fire
	return []cell{{
		name:  "0 destination unreachable (dials refused)",
		setup: func(e *env) { e.net.refuse.Store(true) },
		want:  want{err: ErrRolledBack, is: errRefused, live: liveSource, cleanup: cleanUnreached},
	}, {
		name:  "0b network cut at prepare (the destination's ready lost with its connection)",
		setup: func(e *env) { e.net.add(&fault{side: atDest, kind: kindMigrate, when: isReady, act: actCut}) },
		want:  want{err: ErrRolledBack, text: "prepare", live: liveSource, cleanup: cleanDiscarded},
	}, {
		name:  "0c the destination's ready stalled: the source's message timeout",
		setup: func(e *env) { e.net.add(&fault{side: atDest, kind: kindMigrate, when: isReady, act: actStall}) },
		src:   Timeouts{Message: slow},
		want:  want{err: ErrRolledBack, text: "prepare", live: liveSource, cleanup: cleanDiscarded},
	}, {
		name:  "1 destination refuses at Land",
		setup: func(e *env) { e.host().refuse = errors.New("no room for vm") },
		want:  want{err: ErrRolledBack, text: "the destination refused: no room for vm", live: liveSource, cleanup: cleanNotLanded},
	}, {
		name:  "2 pre-copy cut (data connection dropped mid-stream)",
		setup: func(e *env) { e.net.add(cutAfter(64 << 10)) },
		// The source's failed write, or the destination's hang-up when
		// it saw the stream end first: either cause may be the one named.
		want: want{err: ErrRolledBack, text: "pre-copy", live: liveSource, cleanup: cleanDiscarded},
	}, {
		name: "2b data connection refused after the destination landed",
		setup: func(e *env) {
			e.net.add(&fault{side: atDest, kind: kindMigrate, when: isReady, act: actPass,
				first: func() { e.net.refuse.Store(true) }})
		},
		want: want{err: ErrRolledBack, is: errRefused, text: "pre-copy", live: liveSource, cleanup: cleanDiscarded},
	}, {
		name:  "2c migration cancelled by its caller while the VMM migrates",
		setup: func(e *env) { e.vm.onMigrate = e.cancel },
		want:  want{err: ErrRolledBack, is: context.Canceled, text: "pre-copy", live: liveSource, cleanup: cleanDiscarded},
	}, {
		name: "2d data connection stalled (its hello never arrives): the destination's data timeout",
		setup: func(e *env) {
			e.net.add(&fault{side: atSource, kind: kindData, act: actStall})
			e.vm.precopy = func(ctx context.Context) error { return waitFor(ctx, nil) }
		},
		dst:  Timeouts{Data: slow},
		want: want{err: ErrRolledBack, text: "pre-copy", live: liveSource, cleanup: cleanDiscarded},
	}, {
		name: "2e flipped byte in the vGPU live phase",
		setup: func(e *env) {
			e.net.add(&fault{side: atSource, kind: kindData, act: actCorrupt, when: func(at int64, p []byte) bool {
				return at > 32<<10 && len(p) > stream.FrameHeaderSize
			}})
		},
		// The live phase's section is checked at its end, which comes
		// with the stop phase: the destination refuses there.
		want: want{err: ErrRolledBack, is: precopy.ErrRefused, text: "checksum", live: liveSource, cleanup: cleanDiscarded},
	}, {
		name: "3b destination gmigd killed during the VMM's pre-copy",
		setup: func(e *env) {
			e.vm.precopy = func(ctx context.Context) error {
				e.net.killDest()
				return waitFor(ctx, nil)
			}
		},
		want: want{err: ErrRolledBack, text: "pre-copy", live: liveSource, cleanup: cleanDiscarded},
	}, {
		// In-process the source's code lives on and rolls its side back;
		// the destination sees what a killed source leaves: its
		// connections end with no decision.
		name: "3c source gmigd killed during the VMM's pre-copy (its connections end, nothing said)",
		setup: func(e *env) {
			e.vm.precopy = func(ctx context.Context) error {
				e.net.killSource()
				return waitFor(ctx, nil)
			}
		},
		want: want{err: ErrRolledBack, text: "pre-copy", live: liveSource, cleanup: cleanDiscarded},
	}, {
		name: "3d network cut during the VMM's pre-copy",
		setup: func(e *env) {
			e.vm.precopy = func(ctx context.Context) error {
				e.net.cut()
				return waitFor(ctx, nil)
			}
		},
		want: want{err: ErrRolledBack, text: "pre-copy", live: liveSource, cleanup: cleanDiscarded},
	}, {
		// The stop phase's bytes vanish both ways; the source's bound on
		// it ends the migration and its abort reaches the destination on
		// the control connection.
		name: "3e network stalled from the VMM's pre-copy (data connection partitioned): the source's stop-phase timeout",
		setup: func(e *env) {
			e.vm.precopy = func(context.Context) error {
				e.net.stall(atSource, kindData)
				e.net.stall(atDest, kindData)
				return nil
			}
		},
		src:  Timeouts{Decision: slow},
		want: want{err: ErrRolledBack, is: context.DeadlineExceeded, text: "stop phase", live: liveSource, cleanup: cleanDiscarded},
	}, {
		// The destination takes the stream's hello for no migration of
		// its own and closes it: the source's next write on it fails
		// (pre-copy or stop phase), or the destination's wait for it
		// ends.
		name:    "2f an extra stream names another migration",
		streams: 3,
		setup: func(e *env) {
			e.net.add(&fault{side: atSource, kind: kindStream, act: actRewrite, rewrite: otherMigration})
		},
		dst:  Timeouts{Data: slow},
		want: want{err: ErrRolledBack, live: liveSource, cleanup: cleanDiscarded},
	}, {
		name:    "2g an extra stream never connects (its hello stalled): the destination's data timeout",
		streams: 3,
		setup:   func(e *env) { e.net.add(&fault{side: atSource, kind: kindStream, act: actStall}) },
		dst:     Timeouts{Data: slow},
		want: want{err: ErrRolledBack, is: precopy.ErrRefused, text: "an extra stream of the stop phase did not arrive",
			live: liveSource, cleanup: cleanDiscarded},
	}, {
		name:  "3 SourceVM.WaitPaused fails",
		setup: func(e *env) { e.vm.failWaitPaused = errVMM },
		want:  want{err: ErrRolledBack, is: errVMM, live: liveSource, cleanup: cleanDiscarded},
	}, {
		// The guest powered itself off during QEMU's pre-copy: its QEMU
		// exited, so the wait for the pause fails and so does the resume.
		name:  "3f the source VMM exits during its pre-copy (WaitPaused and Resume fail)",
		setup: func(e *env) { e.vm.failWaitPaused, e.vm.failResume = errVMExited, errVMExited },
		want:  want{err: ErrNotResumed, is: errVMExited, text: "pre-copy", live: liveNone, cleanup: cleanDiscarded},
	}, {
		name: "4a stop phase cut",
		setup: func(e *env) {
			e.net.add(&fault{side: atSource, kind: kindData, when: e.whilePaused, act: actCut})
		},
		want: want{err: ErrRolledBack, text: "stop phase", live: liveSource, cleanup: cleanDiscarded},
	}, {
		name: "4b destination refuses the stream (corrupt byte in the stop phase)",
		setup: func(e *env) {
			e.net.add(&fault{side: atSource, kind: kindData, act: actCorrupt, when: func(at int64, p []byte) bool {
				return e.whilePaused(at, p) && len(p) > stream.FrameHeaderSize
			}})
		},
		want: want{err: ErrRolledBack, is: precopy.ErrRefused, text: "checksum", live: liveSource, cleanup: cleanDiscarded},
	}, {
		name:    "4d an extra stream cut mid-stop",
		streams: 3,
		setup: func(e *env) {
			e.net.add(&fault{side: atSource, kind: kindStream, when: e.whilePaused, act: actCut})
		},
		want: want{err: ErrRolledBack, text: "stop phase", live: liveSource, cleanup: cleanDiscarded},
	}, {
		name:  "5a verdict lost, stream closed",
		setup: func(e *env) { e.net.add(&fault{side: atDest, kind: kindData, act: actMute}) },
		want:  want{err: ErrRolledBack, text: "stop phase", live: liveSource, cleanup: cleanDiscarded},
	}, {
		// The destination gives up at its decision timeout and hangs up;
		// the source hears it on the control connection.
		name:  "5b verdict lost, stream stalled",
		setup: func(e *env) { e.net.add(&fault{side: atDest, kind: kindData, act: actStall}) },
		dst:   Timeouts{Decision: slow},
		want:  want{err: ErrRolledBack, is: context.Canceled, text: "stop phase", live: liveSource, cleanup: cleanDiscarded},
	}, {
		// Nothing the destination does reaches the source: its own
		// bound on the stop phase ends it.
		name: "5c verdict lost, destination partitioned",
		setup: func(e *env) {
			e.net.add(&fault{side: atDest, kind: kindData, act: actStall,
				first: func() { e.net.stall(atDest, kindMigrate) }})
		},
		src:  Timeouts{Decision: slow},
		dst:  Timeouts{Decision: slow},
		want: want{err: ErrRolledBack, is: context.DeadlineExceeded, text: "stop phase", live: liveSource, cleanup: cleanDiscarded},
	}, {
		name: "4c destination gmigd killed during the stop phase",
		setup: func(e *env) {
			e.net.add(&fault{side: atSource, kind: kindData, when: e.whilePaused, act: actPass, first: e.net.killDest})
		},
		want: want{err: ErrRolledBack, text: "stop phase", live: liveSource, cleanup: cleanDiscarded},
	}, {
		name: "6b network cut during the VMM switchover",
		setup: func(e *env) {
			e.vm.switchover = func(ctx context.Context) error {
				if err := e.afterStop(ctx); err != nil {
					return err
				}
				e.net.cut()
				return waitFor(ctx, nil)
			}
		},
		want: want{err: ErrRolledBack, text: "VMM switchover", live: liveSource, cleanup: cleanDiscarded},
	}, {
		name:  "6 SourceVM.Switchover fails (beside the stop phase)",
		setup: func(e *env) { e.vm.failSwitchover = errVMM },
		want:  want{err: ErrRolledBack, is: errVMM, text: "VMM switchover", live: liveSource, cleanup: cleanDiscarded},
	}, {
		name: "6c SourceVM.Switchover fails after the stop phase",
		setup: func(e *env) {
			e.vm.switchover = func(ctx context.Context) error {
				if err := e.afterStop(ctx); err != nil {
					return err
				}
				return errVMM
			}
		},
		want: want{err: ErrRolledBack, is: errVMM, text: "VMM switchover", live: liveSource, cleanup: cleanDiscarded},
	}, {
		// The switchover, started at the quiesce, is still in flight
		// when the stop phase fails: it is cancelled and waited for
		// before the source VM resumes.
		name: "4e stream cut mid-stop, the switchover in flight",
		setup: func(e *env) {
			e.vm.switchover = func(ctx context.Context) error { return waitFor(context.Background(), ctx.Done()) }
			e.net.add(&fault{side: atSource, kind: kindData, when: e.whilePaused, act: actCut})
		},
		want: want{err: ErrRolledBack, text: "stop phase", live: liveSource, cleanup: cleanDiscarded},
	}, {
		name: "7 commit lost (control cut before the destination reads it)",
		setup: func(e *env) {
			e.net.add(&fault{side: atSource, kind: kindMigrate, when: isCommit, act: actDrop})
		},
		want: want{err: ErrRolledBack, text: `the destination says "aborted"`, live: liveSource, cleanup: cleanDiscarded},
	}, {
		name: "8a committed reply lost, connection cut",
		setup: func(e *env) {
			e.net.add(&fault{side: atDest, kind: kindMigrate, when: isCommitted, act: actDrop})
		},
		want: want{live: liveDest, cleanup: cleanReleased},
	}, {
		name: "8b committed reply lost, connection stalled",
		setup: func(e *env) {
			e.net.add(&fault{side: atDest, kind: kindMigrate, when: isCommitted, act: actStall})
		},
		// Long enough that waiting on the stalled connection past the
		// answer shows as a hang.
		// Decision also bounds the stop phase: short, but not so short
		// that a loaded machine's stop phase outlasts it.
		src:  Timeouts{Decision: 5 * time.Second, Message: 2 * guard, Beat: 2 * guard},
		want: want{live: liveDest, cleanup: cleanReleased},
	}, {
		name:  "9a DestVM.WaitLoaded fails after the commit",
		setup: func(e *env) { e.host().breaks.failWaitLoaded = errVMM },
		want:  want{err: ErrRolledBack, text: "could not resume the VM", live: liveSource, cleanup: cleanDiscarded},
	}, {
		name:  "9b DestVM.RestoreFrontEnd fails after the commit",
		setup: func(e *env) { e.host().breaks.failRestore = errVMM },
		want:  want{err: ErrRolledBack, text: "could not resume the VM", live: liveSource, cleanup: cleanDiscarded},
	}, {
		// An early attach (QEMU's kind) fails before or after the
		// decision comes, whichever: the source rolls back either way.
		name: "9d DestVM.WaitLoaded fails in an early attach",
		setup: func(e *env) {
			e.host().breaks.early, e.host().breaks.failWaitLoaded = true, errVMM
		},
		want: want{err: ErrRolledBack, text: "the VMM did not load the VM", live: liveSource, cleanup: cleanDiscarded},
	}, {
		name: "9e DestVM.RestoreFrontEnd fails in an early attach",
		setup: func(e *env) {
			e.host().breaks.early, e.host().breaks.failRestore = true, errVMM
		},
		want: want{err: ErrRolledBack, text: "restoring the vGPU's PCI front end", live: liveSource, cleanup: cleanDiscarded},
	}, {
		name:  "9c DestVM.Resume fails after the commit",
		setup: func(e *env) { e.host().breaks.failResume = errVMM },
		want:  want{err: ErrRolledBack, text: "could not resume the VM", live: liveSource, cleanup: cleanDiscarded},
	}, {
		name: "10a destination killed after the commit; restarted, it answers unknown",
		setup: func(e *env) {
			e.host().breaks.onWaitLoaded = func() error {
				e.net.killDest()
				return errKilled
			}
		},
		src:     Timeouts{Resolve: slow},
		resolve: restartAnswers,
		want:    want{err: ErrOutcomeUnknown, live: liveSource, cleanup: cleanDiscarded},
	}, {
		name: "10b committed reply lost, destination unreachable; then it answers resumed",
		setup: func(e *env) {
			e.net.add(&fault{side: atDest, kind: kindMigrate, when: isCommitted, act: actDrop,
				first: func() { e.net.refuse.Store(true) }})
		},
		src: Timeouts{Resolve: slow},
		resolve: func(t *testing.T, e *env) {
			e.checkPaused(t)
			// It committed before its answer was lost.
			if ls := e.landings(); len(ls) != 1 || !ls[0].Live() {
				t.Fatal("the destination does not run the VM")
			}
			e.net.refuse.Store(false)
			if !e.waitResolved(t) {
				t.Error("OnResolved(false) from a destination that runs the VM")
			}
		},
		want: want{err: ErrOutcomeUnknown, live: liveDest, cleanup: cleanReleased},
	}, {
		name: "10c commit lost, destination unreachable; then it answers aborted",
		setup: func(e *env) {
			e.net.add(&fault{side: atSource, kind: kindMigrate, when: isCommit, act: actDrop,
				first: func() { e.net.refuse.Store(true) }})
		},
		src: Timeouts{Resolve: slow},
		resolve: func(t *testing.T, e *env) {
			e.checkPaused(t)
			if a := e.waitArrival(t); a.Err == nil {
				t.Fatal("the destination ran the VM without the commit")
			}
			e.net.refuse.Store(false)
			if e.waitResolved(t) {
				t.Error("OnResolved(true) from a destination that aborted")
			}
		},
		want: want{err: ErrOutcomeUnknown, live: liveSource, cleanup: cleanDiscarded},
	}, {
		// The destination's hang-up is held back (its control
		// connection stalls from the pause) so that the source does not
		// hear it during the switchover but asks after its commit.
		name: "11 destination's decision timeout during a slow switchover",
		setup: func(e *env) {
			e.vm.onPaused = func() { e.net.stall(atDest, kindMigrate) }
			e.vm.switchover = func(ctx context.Context) error { return waitFor(ctx, e.arrived) }
			e.net.add(&fault{side: atSource, kind: kindMigrate, when: isCommit, act: actPass,
				first: func() { e.net.hangUp(atDest, kindMigrate) }})
		},
		dst:  Timeouts{Decision: slow},
		want: want{err: ErrRolledBack, text: `the destination says "aborted"`, live: liveSource, cleanup: cleanDiscarded},
	}, {
		name:  "12 success",
		setup: func(e *env) { e.vm.onMigrate = func() { e.dev.RunWhileLive(testSeed) } },
		check: checkSuccess,
		want:  want{live: liveDest, cleanup: cleanReleased},
	}, {
		// The guest rewrites every page while the VMM migrates: the
		// whole memory goes on the 4 streams.
		name:    "12b success, the stop phase on 4 streams",
		streams: 4,
		setup: func(e *env) {
			e.vm.onMigrate = func() {
				mem := e.dev.V.Memory()
				for p := 0; p < len(mem); p += stream.PageSize {
					mem[p]++
				}
			}
		},
		check: func(t *testing.T, e *env, rep Report) {
			checkSuccess(t, e, rep)
			if n := e.net.count(atDest, kindStream); n != 3 {
				t.Errorf("%d extra streams reached the destination, want 3", n)
			}
			if got, want := rep.Precopy.Stop.DirtyPages, testMem/stream.PageSize; got != want {
				t.Errorf("%d pages in the stop phase, want all %d", got, want)
			}
		},
		want: want{live: liveDest, cleanup: cleanReleased},
	}, {
		// The switchover completes once the source has heard the
		// destination hang up, which it does at once.
		name: "13 destination shut down while waiting for the decision",
		setup: func(e *env) {
			e.vm.switchover = func(ctx context.Context) error {
				if err := e.afterStop(ctx); err != nil {
					return err
				}
				e.dest(0).stop()
				return waitFor(context.Background(), ctx.Done())
			}
		},
		dst: Timeouts{Decision: 2 * guard}, // only the shutdown can end its wait
		want: want{err: ErrRolledBack, is: ErrDestinationGaveUp,
			text: "VMM switchover: orchestrator: the destination gave up: orchestrator: gmigd shutting down",
			live: liveSource, cleanup: cleanDiscarded},
	}, {
		// The source's VMM takes longer to switch over than the
		// destination waits for the decision: the destination gives up,
		// says why, and the source hears it at once.
		name: "13b the destination's decision timeout fires during the switchover",
		setup: func(e *env) {
			e.vm.switchover = func(ctx context.Context) error { return waitFor(context.Background(), ctx.Done()) }
		},
		dst: Timeouts{Decision: slow},
		want: want{err: ErrRolledBack, is: ErrDestinationGaveUp,
			text: "VMM switchover: orchestrator: the destination gave up: orchestrator: no decision from the source in time",
			live: liveSource, cleanup: cleanDiscarded},
	}}
}

// TestFaultMatrix runs every cell and logs its table; with
// GMIG_RELIABILITY_OUT set it also writes it there as markdown (make
// reliability puts it in docs/reliability.md).
func TestFaultMatrix(t *testing.T) {
	cells := faultCells()
	var mu sync.Mutex
	rows := make([][]string, len(cells))
	t.Run("cells", func(t *testing.T) {
		for i, c := range cells {
			t.Run(c.name, func(t *testing.T) {
				t.Parallel()
				var row []string
				defer func() {
					if t.Failed() || row == nil {
						row = []string{c.name, "FAILED (see the test's log)", "", "", "", ""}
					}
					mu.Lock()
					rows[i] = row
					mu.Unlock()
				}()
				row = runCell(t, c)
				t.Log(strings.Join(row, " | "))
			})
		}
	})
	header := []string{"cell", "the VM runs at", "Migrate returned", "the error the user saw", "cleanup checked", "vGPU memory"}
	t.Log(strings.Join(header, " | "))
	for _, r := range rows {
		t.Log(strings.Join(r, " | "))
	}
	if err := migtest.WriteReliability(migtest.Table{
		Title:  "In-process fault matrix (orchestrator.TestFaultMatrix)",
		Note:   fmt.Sprintf("%d cells, run in parallel under `go test -race`, as observed on this run.", len(cells)),
		Header: header, Rows: rows,
	}); err != nil {
		t.Error(err)
	}
}

// runCell runs one cell and returns its table row, as observed.
func runCell(t *testing.T, c cell) []string {
	e := newEnv(t, c.dst)
	e.streams = c.streams
	if c.setup != nil {
		c.setup(e)
	}
	e.start()
	rep, err := e.migrate(t, e.source(c.src))
	st := rep.Precopy.Stop
	t.Logf("Migrate: %v (%v in all; stop phase %v: quiesce %v scan %v transfer %v restore %v replay %v)",
		err, rep.Total, st.Total, st.Quiesce, st.Scan, st.Transfer, st.Restore, st.Replay)
	outcome := errClass(err)
	checkErr(t, c.want, err)
	if errors.Is(err, ErrOutcomeUnknown) {
		if c.resolve == nil {
			t.Fatal("no resolution planned for this cell")
		}
		c.resolve(t, e)
		outcome += ", then " + e.answer
	} else {
		select {
		case runs := <-e.resolved:
			t.Errorf("OnResolved(%v) after %v", runs, err)
		default:
		}
	}
	if c.want.cleanup != cleanUnreached {
		a := e.waitArrival(t)
		if (a.Err == nil) != (c.want.live == liveDest) {
			t.Errorf("the destination's end %v with the VM live at the %s", a.Err, c.want.live)
		}
	}
	if c.check != nil {
		c.check(t, e, rep)
	}
	checkPhases(t, e, rep, err)
	live := checkLive(t, e, c.want.live)
	cleanup := checkCleanup(t, e, c.want.live)
	if cleanup != c.want.cleanup {
		t.Errorf("cleanup %q, want %q", cleanup, c.want.cleanup)
	}
	memory := checkMemory(t, e, live)
	checkRuns(t, e, live)
	said := "—"
	if err != nil {
		said = err.Error()
	}
	return []string{c.name, live, outcome, said, cleanup, memory}
}
