package sim

import (
	"context"
	"errors"
	"fmt"

	"github.com/gmig-dev/gmig/guest"
)

// Progress is how far a workload has got: steps and operations completed,
// operations by kind.
type Progress struct {
	Steps uint64
	Ops   map[guest.OpKind]uint64
}

// Total is the number of operations.
func (p Progress) Total() uint64 {
	var n uint64
	for _, c := range p.Ops {
		n += c
	}
	return n
}

// sub is the progress from q to p.
func (p Progress) sub(q Progress) Progress {
	d := Progress{Steps: p.Steps - q.Steps, Ops: map[guest.OpKind]uint64{}}
	for k, n := range p.Ops {
		if n > q.Ops[k] {
			d.Ops[k] = n - q.Ops[k]
		}
	}
	return d
}

func (p Progress) String() string { return fmt.Sprintf("%d steps, ops %v", p.Steps, p.Ops) }

// progress is a VM's record of its workload's operation boundaries (the
// gate: before each operation and each step's closing fence), so a caller
// can tell what the guest did while something else ran.
type progress struct {
	n     int               // boundaries passed
	last  Progress          // at the latest
	marks map[int]*Progress // at boundary i for each Mark that returned i (nil: not reached)
	tick  chan struct{}     // closed and replaced at each boundary
}

func newProgress() progress {
	return progress{marks: map[int]*Progress{}, tick: make(chan struct{})}
}

// holdAfter is an armed HoldAfter.
type holdAfter struct {
	mark, after int
	until       func(Progress) bool
}

// recordLocked records a boundary at steps completed steps.
func (vm *VM) recordLocked(steps uint64) {
	p := &vm.prog
	now := Progress{Steps: steps, Ops: vm.w.OpCounts()}
	if m, ok := p.marks[p.n]; ok && m == nil {
		p.marks[p.n] = &now
	}
	p.n++
	p.last = now
	close(p.tick)
	p.tick = make(chan struct{})
}

// reachedLocked reports whether the boundary just recorded is where a
// HoldAfter holds.
func (vm *VM) reachedLocked(a *holdAfter) bool {
	return vm.prog.n-1 >= a.mark+a.after && (a.until == nil || a.until(vm.sinceLocked(a.mark)))
}

// Mark marks the workload's next operation boundary, for Since.
func (vm *VM) Mark() int {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.markLocked()
}

func (vm *VM) markLocked() int {
	n := vm.prog.n
	if _, ok := vm.prog.marks[n]; !ok {
		vm.prog.marks[n] = nil
	}
	return n
}

// Since is the progress from the first boundary after mark to the latest
// one: the operations that began after Mark returned and have ended.
func (vm *VM) Since(mark int) Progress {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.sinceLocked(mark)
}

func (vm *VM) sinceLocked(mark int) Progress {
	m := vm.prog.marks[mark]
	if m == nil {
		return Progress{}
	}
	return vm.prog.last.sub(*m)
}

// Await waits until cond holds for Since(mark). It fails if the workload
// ends, or ctx does, first.
func (vm *VM) Await(ctx context.Context, mark int, cond func(Progress) bool) error {
	for {
		vm.mu.Lock()
		p, tick, fin := vm.sinceLocked(mark), vm.prog.tick, vm.finished
		vm.mu.Unlock()
		if cond(p) {
			return nil
		}
		select {
		case <-tick:
		case <-fin:
			return fmt.Errorf("sim: the workload ended after %v, still waiting", p)
		case <-ctx.Done():
			return fmt.Errorf("sim: waiting for the workload, after %v: %w", p, ctx.Err())
		}
	}
}

// HoldAfter arms a hold at the first operation boundary at least after
// boundaries from now where until (nil: always) holds for the progress
// made since now: the workload waits there, as at a HoldAt; the returned
// channel closes once it waits. Resume lets it go on, or calls the hold
// off before it is reached.
func (vm *VM) HoldAfter(after int, until func(since Progress) bool) (<-chan struct{}, error) {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if vm.stoppingLocked() {
		return nil, errors.New("sim: VM already held, paused or pausing")
	}
	vm.after = &holdAfter{mark: vm.markLocked(), after: after, until: until}
	vm.beginStopLocked()
	return vm.parked, nil
}

// StoppedAt is the workload's step when it last parked at a hold or a
// pause.
func (vm *VM) StoppedAt() uint64 {
	vm.mu.Lock()
	defer vm.mu.Unlock()
	return vm.stopped
}
