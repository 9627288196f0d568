package orchestrator

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/precopy"
)

// The harness of the fault matrix: one source (a real vGPU, programmed
// and filled, behind a fakeSourceVM) and one destination (a Destination
// serving a fakeHost on its own pool), joined by a faultNet, all in this
// process.

// testTimeouts never fire in a cell that does not mean them to, even on a
// loaded machine under the race detector; a cell that means one to fire
// shortens it.
// (A 1 MiB vGPU's stop phase takes about 0.2 s under the race detector
// on a loaded 2-core machine, and was seen at 10 s there.)
var testTimeouts = Timeouts{
	Message:  20 * time.Second,
	Data:     20 * time.Second,
	Decision: 20 * time.Second,
	Resolve:  20 * time.Second,
	Beat:     20 * time.Second,
}

// guard bounds every wait of a test: past it, something hangs.
const guard = time.Minute

const (
	testMem  = 1 << 20 // the vGPU's graphics memory
	testSeed = 7
)

// over returns t with its zero fields taken from base.
func (t Timeouts) over(base Timeouts) Timeouts {
	pick := func(d, b time.Duration) time.Duration {
		if d == 0 {
			return b
		}
		return d
	}
	return Timeouts{
		Message:  pick(t.Message, base.Message),
		Data:     pick(t.Data, base.Data),
		Decision: pick(t.Decision, base.Decision),
		Resolve:  pick(t.Resolve, base.Resolve),
		Beat:     pick(t.Beat, base.Beat),
	}
}

// testLog is quiet unless GMIG_TEST_LOG is set.
func testLog(t *testing.T) zerolog.Logger {
	if os.Getenv("GMIG_TEST_LOG") == "" {
		return migtest.Log
	}
	return zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel).With().Timestamp().Logger()
}

type env struct {
	t     *testing.T
	net   *faultNet
	dev   *migtest.Dev // the source vGPU
	mem0  []byte       // its memory before the migration
	vm    *fakeSourceVM
	beats *Heartbeats // the source's
	addr  string      // the destination's
	first *fakeHost   // the destination's host, until a restart
	// ctx is Migrate's; a cell may cancel it.
	ctx    context.Context
	cancel context.CancelFunc

	dstPool     *pool.Pool
	dstTimeouts Timeouts
	log         zerolog.Logger
	// streams is the vGPU stop phase's stream count, both sides' (0:
	// precopy.DefaultStreams).
	streams int

	mu    sync.Mutex
	dests []*destServer

	arrivals []Arrival     // every destination's, under mu
	arrived  chan struct{} // closed at the first arrival
	resolved chan bool     // OnResolved's answers
	answer   string        // the one waitResolved saw, for the table
	phases   phaseLog
}

// destServer is one destination gmigd: a Destination serving its host.
type destServer struct {
	host *fakeHost
	addr string
	stop context.CancelFunc
	done chan struct{} // closed when Serve has returned
}

// newEnv builds a source and the host of a destination that will run
// under dst (zero fields: testTimeouts); start starts it, once the cell
// has broken what it breaks.
func newEnv(t *testing.T, dst Timeouts) *env {
	t.Helper()
	srcPool := migtest.NewPool(t, 2*testMem)
	dev := migtest.NewDev(t, srcPool, "vm", testMem, testSeed)
	dev.FillMemory(testSeed)
	beats := NewHeartbeats()
	beats.Record(1, time.Now())
	e := &env{
		t: t, net: &faultNet{}, dev: dev, mem0: bytes.Clone(dev.V.Memory()),
		vm: newFakeSourceVM(beats), beats: beats,
		dstPool: migtest.NewPool(t, 4*testMem), dstTimeouts: dst.over(testTimeouts), log: testLog(t),
		arrived: make(chan struct{}), resolved: make(chan bool, 2),
	}
	e.ctx, e.cancel = context.WithCancel(context.Background())
	t.Cleanup(e.cancel)
	// Sockets first, so nothing waits on a stalled one; then the
	// destinations; then their vGPUs (the pools close after).
	t.Cleanup(func() {
		e.net.closeAll()
		e.mu.Lock()
		dests := e.dests
		e.mu.Unlock()
		for _, d := range dests {
			d.stop()
			select {
			case <-d.done:
			case <-time.After(guard):
				t.Errorf("a destination's Serve did not return in %v", guard)
			}
			d.host.close()
		}
	})
	e.first = &fakeHost{pool: e.dstPool}
	return e
}

// start starts the destination the migration goes to, with the host the
// cell has broken as it meant to.
func (e *env) start() {
	e.addr = e.startDest("127.0.0.1:0", e.first).addr
}

// startDest starts a destination gmigd for h (a new instance) listening
// on addr.
func (e *env) startDest(addr string, h *fakeHost) *destServer {
	e.t.Helper()
	l, err := e.net.Listen(addr)
	if err != nil {
		e.t.Fatal(err)
	}
	d := NewDestination(h, DestinationOptions{Timeouts: e.dstTimeouts, Log: e.log, OnArrival: e.arrive, Streams: e.streams})
	ctx, cancel := context.WithCancel(context.Background())
	s := &destServer{host: h, addr: l.Addr().String(), stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		if err := d.Serve(ctx, l); err != nil {
			e.t.Errorf("Serve: %v", err)
		}
	}()
	e.mu.Lock()
	e.dests = append(e.dests, s)
	e.mu.Unlock()
	return s
}

// dest returns the i-th destination started.
func (e *env) dest(i int) *destServer {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.dests[i]
}

// host is the first destination's host, the one the migration lands on.
func (e *env) host() *fakeHost { return e.first }

// landings are every destination's.
func (e *env) landings() []*fakeLanding {
	e.mu.Lock()
	dests := e.dests
	e.mu.Unlock()
	var all []*fakeLanding
	for _, d := range dests {
		all = append(all, d.host.Landings()...)
	}
	return all
}

func (e *env) arrive(a Arrival) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.arrivals = append(e.arrivals, a)
	if len(e.arrivals) == 1 {
		close(e.arrived)
	}
}

// waitArrival returns the migration's end at the destination, once it
// has come, failing if it came more than once.
func (e *env) waitArrival(t *testing.T) Arrival {
	t.Helper()
	select {
	case <-e.arrived:
	case <-time.After(guard):
		t.Fatalf("no arrival at the destination in %v", guard)
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.arrivals) != 1 {
		t.Errorf("%d arrivals at the destination, want 1", len(e.arrivals))
	}
	return e.arrivals[0]
}

// waitResolved returns OnResolved's answer.
func (e *env) waitResolved(t *testing.T) bool {
	t.Helper()
	select {
	case runs := <-e.resolved:
		e.answer = fmt.Sprintf("OnResolved(%v)", runs)
		return runs
	case <-time.After(guard):
		t.Fatalf("OnResolved not called in %v", guard)
		return false
	}
}

// source is the Source of the migration, under src (zero fields:
// testTimeouts).
func (e *env) source(src Timeouts) Source {
	return Source{
		VGPU: e.dev.V, VM: e.vm, Beats: e.beats, Peer: e.addr, Transport: e.net,
		VMKind: "fake", Timeouts: src.over(testTimeouts), Precopy: precopy.Options{Streams: e.streams},
		Progress:   e.phases.add,
		OnResolved: func(runs bool) { e.resolved <- runs },
		Log:        e.log,
	}
}

// migrate runs Migrate, failing the test if it hangs.
func (e *env) migrate(t *testing.T, s Source) (Report, error) {
	t.Helper()
	type result struct {
		rep Report
		err error
	}
	ch := make(chan result, 1)
	go func() {
		rep, err := Migrate(e.ctx, s)
		ch <- result{rep, err}
	}()
	select {
	case r := <-ch:
		return r.rep, r.err
	case <-time.After(guard):
		t.Fatalf("Migrate did not return in %v", guard)
		return Report{}, nil
	}
}

// checkPaused checks the source as ErrOutcomeUnknown leaves it: the VM
// paused, neither resumed nor released, its vGPU quiesced and its memory
// as it was.
func (e *env) checkPaused(t *testing.T) {
	t.Helper()
	if st := e.vm.State(); st != vmPaused {
		t.Errorf("source VM %s, want paused", st)
	}
	if n, m := e.vm.n("Resume", false), e.vm.n("Release", false); n != 0 || m != 0 {
		t.Errorf("source VM resumed %d, released %d times with the outcome unknown", n, m)
	}
	if !migtest.Quiesced(t, e.dev.V) {
		t.Error("source vGPU runs with the outcome unknown")
	}
	if !bytes.Equal(e.dev.V.Memory(), e.mem0) {
		t.Error("source vGPU memory changed")
	}
}

// phaseLog records the phases Progress reported, each once per run of
// snapshots, and the migration IDs they named.
type phaseLog struct {
	mu      sync.Mutex
	phases  []string
	ids     map[string]bool
	reached map[string]chan struct{} // closed once the phase is reported
}

// reachedLocked returns the channel closed once phase is reported.
func (l *phaseLog) reachedLocked(phase string) chan struct{} {
	if l.reached == nil {
		l.reached = map[string]chan struct{}{}
	}
	ch, ok := l.reached[phase]
	if !ok {
		ch = make(chan struct{})
		l.reached[phase] = ch
	}
	return ch
}

// wait returns once phase has been reported, or ctx's error if it ends
// first.
func (l *phaseLog) wait(ctx context.Context, phase string) error {
	l.mu.Lock()
	ch := l.reachedLocked(phase)
	l.mu.Unlock()
	return waitFor(ctx, ch)
}

func (l *phaseLog) add(p Progress) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.ids == nil {
		l.ids = map[string]bool{}
	}
	l.ids[p.ID] = true
	if ch := l.reachedLocked(p.Phase); !isClosed(ch) {
		close(ch)
	}
	if n := len(l.phases); n == 0 || l.phases[n-1] != p.Phase {
		l.phases = append(l.phases, p.Phase)
	}
}

func (l *phaseLog) get() (phases []string, ids map[string]bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.phases...), l.ids
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// afterStop waits, inside a fake's Switchover, until the vGPU's stop
// phase has ended (the migration entered PhaseSwitchover): a fault meant
// for the switchover's wait after it, not for the part beside the stop
// phase. It returns ctx's error if ctx ends first.
func (e *env) afterStop(ctx context.Context) error {
	return e.phases.wait(ctx, PhaseSwitchover)
}
