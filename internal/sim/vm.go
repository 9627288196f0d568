package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/guest"
)

// VM is the simulator playing a whole virtual machine: guest RAM and a
// vfio-user attachment (QEMU's part), the guest driver and a seeded workload
// (the guest's part). It can be paused at an operation boundary — with
// commands possibly in flight on the device, as a VM stop leaves them — and
// moved to another vGPU socket keeping its RAM, as a migration's destination
// QEMU would.
type VM struct {
	opts Options
	bus  *Bus
	d    *guest.Driver
	w    *guest.Workload

	mu       sync.Mutex
	pauseReq bool
	paused   chan struct{} // closed when the guest stops at a boundary
	resume   chan struct{}
	running  bool
	finished chan struct{} // closed when Run returns
	waiters  []stepWaiter
	hbParked chan struct{} // closed when the heartbeat has stopped for a pause
	hbOn     bool          // a heartbeat goroutine runs
	at       *pausePoint   // an armed PauseAt

	busMu sync.RWMutex // the heartbeat's bus use against Move's swap
}

// pausePoint is an armed PauseAt: the op-th boundary of step step.
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

// StartVM attaches to the vGPU at socket, opens the driver and prepares the
// workload (seeded by seed; the driver's GTT permutation too).
func StartVM(socket string, seed int64, wcfg guest.WorkloadConfig, opts Options) (*VM, error) {
	bus, err := Attach(socket, opts)
	if err != nil {
		return nil, err
	}
	vm := &VM{opts: opts, bus: bus}
	if vm.d, err = guest.Open(bus, guest.Options{Seed: seed, UseIRQ: !opts.NoIRQ}); err == nil {
		vm.w, err = guest.NewWorkload(seed, wcfg)
	}
	if err != nil {
		bus.Close()
		return nil, err
	}
	vm.w.SetGate(vm.gate)
	return vm, nil
}

// Workload returns the VM's workload (for step counts and op statistics).
func (vm *VM) Workload() *guest.Workload { return vm.w }

// Run runs the workload for steps steps on the calling goroutine, stopping
// at the gate while the VM is paused.
func (vm *VM) Run(ctx context.Context, steps int) error {
	vm.mu.Lock()
	if vm.running {
		vm.mu.Unlock()
		return errors.New("sim: VM already running")
	}
	vm.running, vm.finished = true, make(chan struct{})
	fin := vm.finished
	vm.mu.Unlock()
	defer func() {
		vm.mu.Lock()
		vm.running = false
		vm.mu.Unlock()
		close(fin)
	}()
	return vm.w.Run(ctx, vm.d, steps)
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
	if at := vm.at; at != nil && steps == at.step {
		if at.count++; at.count >= at.op {
			vm.at, vm.pauseReq = nil, true
		}
	}
	if !vm.pauseReq {
		vm.mu.Unlock()
		return nil
	}
	paused, resume := vm.paused, vm.resume
	vm.mu.Unlock()
	if !park(paused, resume, ctx.Done()) {
		return ctx.Err()
	}
	return nil
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

// PauseAt arms a pause at a fixed point of the workload: its op-th
// operation boundary (1-based; the step's closing fence is one too) in
// step step, so runs that must stop at the same place do. The returned
// channel closes once the guest has stopped there; Resume lets it go on.
func (vm *VM) PauseAt(step uint64, op int) (<-chan struct{}, error) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.pauseReq || vm.at != nil {
		return nil, errors.New("sim: VM already paused or pausing")
	}
	vm.at = &pausePoint{step: step, op: op}
	vm.paused, vm.resume = make(chan struct{}), make(chan struct{})
	vm.hbParked = make(chan struct{})
	return vm.paused, nil
}

// Pause stops the guest at its next operation boundary and returns once it
// has stopped (or its workload has finished, or ctx ends). The guest stays
// stopped until Resume.
func (vm *VM) Pause(ctx context.Context) error {
	vm.mu.Lock()
	if vm.pauseReq || vm.at != nil {
		vm.mu.Unlock()
		return errors.New("sim: VM already paused or pausing")
	}
	vm.pauseReq = true
	vm.paused, vm.resume = make(chan struct{}), make(chan struct{})
	vm.hbParked = make(chan struct{})
	paused, fin, running, hb, parked := vm.paused, vm.finished, vm.running, vm.hbOn, vm.hbParked
	vm.mu.Unlock()
	if running {
		select {
		case <-paused:
		case <-fin:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if hb {
		select {
		case <-parked:
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

// Resume lets a paused guest go on (and calls off an armed PauseAt).
func (vm *VM) Resume() {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.pauseReq || vm.at != nil {
		vm.pauseReq, vm.at = false, nil
		close(vm.resume)
	}
}

// Move re-attaches the paused VM to the vGPU at socket, keeping guest RAM,
// and rebinds the driver: what a migration's destination QEMU and the
// migrated guest see.
func (vm *VM) Move(socket string) error {
	vm.busMu.Lock()
	defer vm.busMu.Unlock()
	fd, err := unix.Dup(int(vm.bus.RAMFile().Fd()))
	if err != nil {
		return fmt.Errorf("sim: keeping guest RAM: %w", err)
	}
	ram := os.NewFile(uintptr(fd), "guest-ram")
	defer ram.Close()
	if err := vm.bus.Close(); err != nil {
		return fmt.Errorf("sim: leaving the old vGPU: %w", err)
	}
	opts := vm.opts
	opts.RAM, opts.RAMSize = ram, 0
	if vm.bus, err = Attach(socket, opts); err != nil {
		return err
	}
	return vm.d.Rebind(vm.bus)
}

// Digest is the workload's graphics-memory digest.
func (vm *VM) Digest() ([32]byte, error) { return vm.w.Digest(vm.d) }

// Close detaches from the vGPU.
func (vm *VM) Close() error { return vm.bus.Close() }
