package orchestrator

import (
	"context"
	"errors"
	"net"
	"sync"
	"time"

	"github.com/gmig-dev/gmig/internal/apilog"
	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/vgpu"
)

// The VMs and the destination host the fault matrix drives: fakes that
// record every call with its time and that a test can break.

// call is one recorded call: when it started and returned, and its error.
type call struct {
	name       string
	start, end time.Time
	err        error
}

// calls is a concurrency-safe call record.
type calls struct {
	lock sync.Mutex
	list []call
}

// record adds a call that started at start and returns err.
func (c *calls) record(name string, start time.Time, err error) error {
	c.lock.Lock()
	c.list = append(c.list, call{name, start, time.Now(), err})
	c.lock.Unlock()
	return err
}

// n counts the calls of name (that returned err == nil when ok).
func (c *calls) n(name string, ok bool) int {
	c.lock.Lock()
	defer c.lock.Unlock()
	k := 0
	for _, x := range c.list {
		if x.name == name && (!ok || x.err == nil) {
			k++
		}
	}
	return k
}

// first returns the first call of name.
func (c *calls) first(name string) (call, bool) {
	c.lock.Lock()
	defer c.lock.Unlock()
	for _, x := range c.list {
		if x.name == name {
			return x, true
		}
	}
	return call{}, false
}

var (
	errVMM      = errors.New("fake VMM: failed")
	errVMExited = errors.New("fake VMM: exited")
)

// Source VM states.
const (
	vmRunning     = "running"
	vmMigrating   = "migrating"    // its VMM migrates it; it runs
	vmPauseFailed = "pause-failed" // the pause failed: running or not, only Resume says
	vmPaused      = "paused"
	vmReleased    = "released"
)

// fakeSourceVM is a SourceVM. Its breaks and hooks are set before the
// migration starts.
type fakeSourceVM struct {
	calls
	beats *Heartbeats // the source's: a beat just before the pause

	failWaitPaused, failSwitchover, failResume error
	onMigrate                                  func()                          // the guest's work while its VMM migrates
	onPaused                                   func()                          // right after the pause
	precopy                                    func(ctx context.Context) error // the VMM's RAM pre-copy, before the pause (nil: instant)
	switchover                                 func(ctx context.Context) error // replaces Switchover's work

	mu       sync.Mutex
	state    string
	pausedAt time.Time
}

var _ SourceVM = (*fakeSourceVM)(nil)

func newFakeSourceVM(beats *Heartbeats) *fakeSourceVM {
	return &fakeSourceVM{beats: beats, state: vmRunning}
}

func (vm *fakeSourceVM) set(state string) {
	vm.mu.Lock()
	vm.state = state
	vm.mu.Unlock()
}

// State is the VM's state now.
func (vm *fakeSourceVM) State() string {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.state
}

func (vm *fakeSourceVM) Migrate(ctx context.Context, target string) error {
	start := time.Now()
	vm.set(vmMigrating)
	if vm.onMigrate != nil {
		vm.onMigrate()
	}
	return vm.record("Migrate", start, nil)
}

func (vm *fakeSourceVM) WaitPaused(ctx context.Context) (time.Time, error) {
	start := time.Now()
	err := vm.failWaitPaused
	if err == nil && vm.precopy != nil {
		err = vm.precopy(ctx)
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		vm.set(vmPauseFailed)
		return time.Time{}, vm.record("WaitPaused", start, err)
	}
	at := time.Now()
	vm.beats.Record(2, at.Add(-time.Millisecond))
	vm.mu.Lock()
	vm.state, vm.pausedAt = vmPaused, at
	vm.mu.Unlock()
	if vm.onPaused != nil {
		vm.onPaused()
	}
	return at, vm.record("WaitPaused", start, nil)
}

// PausedAt is the pause's time as WaitPaused returned it.
func (vm *fakeSourceVM) PausedAt() time.Time {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.pausedAt
}

func (vm *fakeSourceVM) Switchover(ctx context.Context) error {
	start := time.Now()
	err := vm.failSwitchover
	if vm.switchover != nil {
		err = vm.switchover(ctx)
	}
	return vm.record("Switchover", start, err)
}

func (vm *fakeSourceVM) Progress() VMMProgress { return VMMProgress{Status: vm.State()} }

func (vm *fakeSourceVM) Resume(ctx context.Context) error {
	start := time.Now()
	if vm.failResume != nil {
		return vm.record("Resume", start, vm.failResume)
	}
	vm.set(vmRunning)
	return vm.record("Resume", start, nil)
}

func (vm *fakeSourceVM) Release(ctx context.Context) error {
	start := time.Now()
	vm.set(vmReleased)
	return vm.record("Release", start, nil)
}

// destBreaks are the failures a cell gives the destination's VMs.
type destBreaks struct {
	failWaitLoaded, failRestore, failResume error
	onWaitLoaded                            func() error // replaces WaitLoaded's work
	// early makes the VM an EarlyAttacher that attaches before the
	// decision (as QEMU does; the default attaches after it, as the
	// simulator does); onRestored is called after RestoreFrontEnd.
	early      bool
	onRestored func()
}

// fakeDestVM is a DestVM.
type fakeDestVM struct {
	calls
	destBreaks
	beats *Heartbeats // the destination's: a beat just after the resume

	mu        sync.Mutex
	running   bool
	resumedAt time.Time
	frontEnd  []apilog.Entry
}

var (
	_ DestVM        = (*fakeDestVM)(nil)
	_ EarlyAttacher = (*fakeDestVM)(nil)
)

func (vm *fakeDestVM) Incoming() string { return "" }

func (vm *fakeDestVM) WaitLoaded(ctx context.Context) error {
	start := time.Now()
	err := vm.failWaitLoaded
	if vm.onWaitLoaded != nil {
		err = vm.onWaitLoaded()
	}
	return vm.record("WaitLoaded", start, err)
}

func (vm *fakeDestVM) RestoreFrontEnd(ctx context.Context, writes []apilog.Entry) error {
	start := time.Now()
	vm.mu.Lock()
	vm.frontEnd = writes
	vm.mu.Unlock()
	err := vm.record("RestoreFrontEnd", start, vm.failRestore)
	if vm.onRestored != nil {
		vm.onRestored()
	}
	return err
}

func (vm *fakeDestVM) AttachBeforeCommit() bool { return vm.early }

func (vm *fakeDestVM) Resume(ctx context.Context) (time.Time, error) {
	start := time.Now()
	if vm.failResume != nil {
		return time.Time{}, vm.record("Resume", start, vm.failResume)
	}
	at := time.Now()
	vm.mu.Lock()
	vm.running, vm.resumedAt = true, at
	vm.mu.Unlock()
	vm.beats.Record(3, at.Add(time.Millisecond))
	return at, vm.record("Resume", start, nil)
}

// Running reports whether the VM runs (resumed, not discarded).
func (vm *fakeDestVM) Running() bool {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.running
}

// fakeHost is a destination's Host: it lands migrations on real vGPUs in
// its own pool, with fake VMs, unless it refuses.
type fakeHost struct {
	pool   *pool.Pool
	refuse error
	breaks destBreaks
	// software lands every vGPU on the software back end: a Host that
	// does not create what the spec says.
	software bool

	mu       sync.Mutex
	lands    int
	landings []*fakeLanding
}

var _ Host = (*fakeHost)(nil)

func (h *fakeHost) Land(ctx context.Context, p Prepare, via net.Addr) (Landing, error) {
	h.mu.Lock()
	h.lands++
	h.mu.Unlock()
	if h.refuse != nil {
		return nil, h.refuse
	}
	cfg, err := p.VGPU.Config(p.Name)
	if err != nil {
		return nil, err
	}
	if h.software {
		cfg.Backend, cfg.GuestModules = vgpu.BackendSoftware, false
	}
	v, err := vgpu.New(cfg, h.pool, migtest.Log)
	if err != nil {
		return nil, err
	}
	v.Quiesce()
	beats := NewHeartbeats()
	l := &fakeLanding{v: v, beats: beats, vm: &fakeDestVM{destBreaks: h.breaks, beats: beats}}
	h.mu.Lock()
	h.landings = append(h.landings, l)
	h.mu.Unlock()
	return l, nil
}

// Lands counts the calls of Land.
func (h *fakeHost) Lands() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lands
}

// Landings returns what the host landed.
func (h *fakeHost) Landings() []*fakeLanding {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]*fakeLanding(nil), h.landings...)
}

// close closes every landed vGPU (test cleanup).
func (h *fakeHost) close() {
	for _, l := range h.Landings() {
		l.v.Close()
	}
}

// fakeLanding is a landed migration; Discard closes its vGPU, as a
// gmigd destroys it.
type fakeLanding struct {
	calls
	v     *vgpu.VGPU
	vm    *fakeDestVM
	beats *Heartbeats
}

func (l *fakeLanding) VGPU() *vgpu.VGPU   { return l.v }
func (l *fakeLanding) VM() DestVM         { return l.vm }
func (l *fakeLanding) Beats() *Heartbeats { return l.beats }
func (l *fakeLanding) Commit()            { l.record("Commit", time.Now(), nil) }

func (l *fakeLanding) Discard() {
	start := time.Now()
	l.vm.mu.Lock()
	l.vm.running = false
	l.vm.mu.Unlock()
	l.v.Close()
	l.record("Discard", start, nil)
}

// Live reports whether the landed VM runs here as this host's own.
func (l *fakeLanding) Live() bool {
	return l.vm.Running() && l.n("Commit", false) == 1 && l.n("Discard", false) == 0
}
