package sim

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/guest"
)

// VM is the simulator playing a whole virtual machine: guest RAM and a
// vfio-user attachment (QEMU's part), the guest driver and a seeded workload
// (the guest's part). It can be paused at an operation boundary — with
// commands possibly in flight on the device, as a VM stop leaves them — and
// moved to another vGPU socket keeping its RAM, as a migration's destination
// QEMU would.
//
// A stop has two strengths: a hold (HoldAt) parks only the workload, at a
// fixed operation, while the guest's heartbeat goes on — the VM runs, its
// application waits; a pause (Pause) parks the workload at its next
// boundary (or where it is held) and the heartbeat too — the VM is stopped.
// Resume ends either.
type VM struct {
	opts Options
	bus  *Bus
	d    *guest.Driver
	w    *guest.Workload

	mu       sync.Mutex
	pauseReq bool          // a pause: workload and heartbeat park
	holdReq  bool          // a hold reached: the workload parks
	at       *pausePoint   // an armed HoldAt, not reached yet
	after    *holdAfter    // an armed HoldAfter, not reached yet
	stopped  uint64        // the workload's step when it last parked
	parked   chan struct{} // this stop's: closed when the workload parks
	resume   chan struct{} // this stop's: closed by Resume
	hbParked chan struct{} // this stop's: closed when the heartbeat has parked
	running  bool
	finished chan struct{} // closed when Run (or Start's run) returns
	runErr   error         // Start's run's, once finished is closed
	prog     progress      // the workload's boundaries (progress.go)
	waiters  []stepWaiter
	hbOn     bool          // a heartbeat goroutine runs
	pace     uint64        // Pace's limit (0: none)
	paced    chan struct{} // closed when the workload waits at the limit
	wake     chan struct{} // closed and replaced when a waiting workload must look again

	busMu sync.RWMutex // the heartbeat's bus use against Move's swap
}

// pausePoint is an armed HoldAt: the op-th boundary of step step.
type pausePoint struct {
	step  uint64
	op    int
	count int
}

// stepWaiter is a WaitStep call: ch closes once the workload has run step
// steps.
type stepWaiter struct {
	step uint64
	ch   chan struct{}
}

// NewVM attaches to the vGPU at socket and opens the driver, its GTT
// permutation seeded by gttSeed; SetWorkload gives it a workload.
func NewVM(socket string, gttSeed int64, opts Options) (*VM, error) {
	bus, err := Attach(socket, opts)
	if err != nil {
		return nil, err
	}
	vm := &VM{opts: opts, bus: bus, wake: make(chan struct{}), paced: make(chan struct{}), prog: newProgress()}
	if vm.d, err = guest.Open(bus, guest.Options{Seed: gttSeed, UseIRQ: !opts.NoIRQ}); err != nil {
		bus.Close()
		return nil, err
	}
	return vm, nil
}

// StartVM attaches to the vGPU at socket, opens the driver and prepares the
// workload (seeded by seed; the driver's GTT permutation too).
func StartVM(socket string, seed int64, wcfg guest.WorkloadConfig, opts Options) (*VM, error) {
	vm, err := NewVM(socket, seed, opts)
	if err != nil {
		return nil, err
	}
	if err := vm.SetWorkload(seed, wcfg); err != nil {
		vm.Close()
		return nil, err
	}
	return vm, nil
}

// SetWorkload prepares the workload of seed and cfg, for Run or Start
// (before either).
func (vm *VM) SetWorkload(seed int64, cfg guest.WorkloadConfig) error {
	w, err := guest.NewWorkload(seed, cfg)
	if err != nil {
		return err
	}
	w.SetGate(vm.gate)
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.running {
		return errors.New("sim: the workload runs")
	}
	vm.w = w
	return nil
}

// Workload returns the VM's workload (for step counts and op statistics).
func (vm *VM) Workload() *guest.Workload { return vm.w }

// Driver returns the VM's guest driver, for guest work of the caller's
// own while the workload does not run (it follows the VM when it moves).
func (vm *VM) Driver() *guest.Driver { return vm.d }

// Run runs the workload for steps steps on the calling goroutine, stopping
// at the gate while the VM is paused.
func (vm *VM) Run(ctx context.Context, steps int) error {
	end, err := vm.begin()
	if err != nil {
		return err
	}
	defer end()
	return vm.w.Run(ctx, vm.d, steps)
}

// Start runs the workload for steps steps on a goroutine of its own;
// Finished and Wait tell when it ends.
func (vm *VM) Start(ctx context.Context, steps int) error {
	end, err := vm.begin()
	if err != nil {
		return err
	}
	go func() {
		err := vm.w.Run(ctx, vm.d, steps)
		vm.mu.Lock()
		vm.runErr = err
		vm.mu.Unlock()
		end()
	}()
	return nil
}

// Finished is closed when the workload's latest run (Run or Start) has
// ended; nil before the first.
func (vm *VM) Finished() <-chan struct{} {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.finished
}

// Wait waits for Start's run to end and returns its error.
func (vm *VM) Wait() error {
	<-vm.Finished()
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.runErr
}

// begin marks the VM running (one program at a time); end marks it
// stopped and closes the channel Run's waiters watch.
func (vm *VM) begin() (end func(), err error) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.running {
		return nil, errors.New("sim: VM already running")
	}
	if vm.w == nil {
		return nil, errors.New("sim: VM without a workload (SetWorkload)")
	}
	vm.running, vm.finished = true, make(chan struct{})
	fin := vm.finished
	return func() {
		vm.mu.Lock()
		vm.running = false
		vm.mu.Unlock()
		close(fin)
	}, nil
}

// gate stops the workload while a pause is requested, and tells step
// waiters. It runs on the workload's goroutine.
func (vm *VM) gate(ctx context.Context) error {
	steps := vm.w.Steps()
	vm.mu.Lock()
	kept := vm.waiters[:0]
	for _, w := range vm.waiters {
		if steps >= w.step {
			close(w.ch)
		} else {
			kept = append(kept, w)
		}
	}
	vm.waiters = kept
	vm.recordLocked(steps)
	if at := vm.at; at != nil && steps == at.step {
		if at.count++; at.count >= at.op {
			vm.at, vm.holdReq = nil, true
		}
	}
	if a := vm.after; a != nil && vm.reachedLocked(a) {
		vm.after, vm.holdReq = nil, true
	}
	for {
		if vm.pauseReq || vm.holdReq {
			vm.stopped = steps
			parked, resume := vm.parked, vm.resume
			vm.mu.Unlock()
			if !park(parked, resume, ctx.Done()) {
				return ctx.Err()
			}
			vm.mu.Lock()
			continue
		}
		if vm.pace == 0 || steps < vm.pace {
			vm.mu.Unlock()
			return nil
		}
		// Paced: wait, running, until the limit rises or a stop comes.
		select {
		case <-vm.paced:
		default:
			close(vm.paced)
		}
		wake := vm.wake
		vm.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return ctx.Err()
		}
		vm.mu.Lock()
	}
}

// Pace lets the workload complete steps steps and then wait, running (its
// heartbeat goes on), until Pace is called again with a higher number (0:
// no limit). Pauses and holds work as ever meanwhile. The returned channel
// closes once the workload waits at the limit.
func (vm *VM) Pace(steps uint64) <-chan struct{} {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	vm.pace, vm.paced = steps, make(chan struct{})
	vm.wakeLocked()
	return vm.paced
}

// wakeLocked wakes a workload waiting at its pace limit to look again.
func (vm *VM) wakeLocked() {
	close(vm.wake)
	vm.wake = make(chan struct{})
}

// stoppingLocked reports whether a stop (hold or pause) is armed or in
// place.
func (vm *VM) stoppingLocked() bool {
	return vm.pauseReq || vm.holdReq || vm.at != nil || vm.after != nil
}

// beginStopLocked makes the channels of a new stop.
func (vm *VM) beginStopLocked() {
	vm.parked, vm.resume, vm.hbParked = make(chan struct{}), make(chan struct{}), make(chan struct{})
}

// park announces a stop on parked (closing it once) and waits for resume;
// false means stop came first.
func park(parked, resume chan struct{}, stop <-chan struct{}) bool {
	select {
	case <-parked:
	default:
		close(parked)
	}
	select {
	case <-resume:
		return true
	case <-stop:
		return false
	}
}

// WaitStep returns once the workload has completed step steps (or has
// finished, or ctx ends).
func (vm *VM) WaitStep(ctx context.Context, step uint64) error {
	ch := make(chan struct{})
	vm.mu.Lock()
	vm.waiters = append(vm.waiters, stepWaiter{step, ch})
	fin := vm.finished
	vm.mu.Unlock()
	select {
	case <-ch:
		return nil
	case <-fin:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// HoldAt arms a hold at a fixed point of the workload: its op-th
// operation boundary (1-based; the step's closing fence is one too) in
// step step, so runs that must stop at the same place do. The workload
// waits there while the guest's heartbeat goes on (the VM keeps running);
// the returned channel closes once it waits. Pause then stops the whole VM
// there; Resume lets it go on.
func (vm *VM) HoldAt(step uint64, op int) (<-chan struct{}, error) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.stoppingLocked() {
		return nil, errors.New("sim: VM already held, paused or pausing")
	}
	vm.at = &pausePoint{step: step, op: op}
	vm.beginStopLocked()
	return vm.parked, nil
}

// Pause stops the guest — its workload at the next operation boundary (or
// where a hold keeps it), its heartbeat — and returns once both have
// stopped (or the workload has finished, or ctx ends). The guest stays
// stopped until Resume.
func (vm *VM) Pause(ctx context.Context) error {
	vm.mu.Lock()
	if vm.pauseReq {
		vm.mu.Unlock()
		return errors.New("sim: VM already paused or pausing")
	}
	if !vm.holdReq && vm.at == nil && vm.after == nil {
		vm.beginStopLocked()
	}
	vm.pauseReq, vm.at, vm.after = true, nil, nil
	vm.wakeLocked()
	parked, fin, running, hb, hbParked := vm.parked, vm.finished, vm.running, vm.hbOn, vm.hbParked
	vm.mu.Unlock()
	if running {
		select {
		case <-parked:
		case <-fin:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if hb {
		select {
		case <-hbParked:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// StartHeartbeat writes an increasing value to the vGPU's HEARTBEAT
// register every period, as the guest program does inside a real VM, so the
// host can time the guest's pauses with its own clock. The heartbeat stops
// while the VM is paused (Pause waits for it) and follows Move. stop ends it.
func (vm *VM) StartHeartbeat(period time.Duration) (stop func()) {
	vm.mu.Lock()
	vm.hbOn = true
	vm.mu.Unlock()
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(period)
		defer tick.Stop()
		for i := uint64(1); ; i++ {
			select {
			case <-quit:
				return
			case <-tick.C:
			}
			if !vm.heartbeatGate(quit) {
				return
			}
			vm.busMu.RLock()
			_ = vm.bus.WriteReg64(abi.RegHeartbeat, i)
			vm.busMu.RUnlock()
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(quit)
			<-done
			vm.mu.Lock()
			vm.hbOn = false
			vm.mu.Unlock()
		})
	}
}

// heartbeatGate parks the heartbeat while the VM is paused; false means
// quit.
func (vm *VM) heartbeatGate(quit chan struct{}) bool {
	vm.mu.Lock()
	if !vm.pauseReq {
		vm.mu.Unlock()
		return true
	}
	parked, resume := vm.hbParked, vm.resume
	vm.mu.Unlock()
	return park(parked, resume, quit)
}

// Resume lets a paused or held guest go on (and calls off an armed
// HoldAt or HoldAfter).
func (vm *VM) Resume() {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.stoppingLocked() {
		vm.pauseReq, vm.holdReq, vm.at, vm.after = false, false, nil, nil
		close(vm.resume)
	}
}

// Digest is the workload's graphics-memory digest.
func (vm *VM) Digest() ([32]byte, error) { return vm.w.Digest(vm.d) }

// Close detaches from the vGPU.
func (vm *VM) Close() error { return vm.Bus().Close() }
