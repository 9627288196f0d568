package engine

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gmig-dev/gmig/abi"
)

// State is the engine's whole non-memory state (docs/device-abi.md §8):
// registers, pending ring work and kernel objects. It is plain data; the
// back end, GTT and guest memory come from the restoring engine's Config.
type State struct {
	RingBase  uint64
	RingSize  uint32
	Head      uint32
	Tail      uint32
	Enabled   bool
	FenceDone uint64
	CmdsDone  uint64
	Kernels   []KernelObject // sorted by handle
}

// KernelObject is one loaded kernel object (§6.5).
type KernelObject struct {
	Handle uint32
	Kind   uint32
}

// Save returns the engine's state. The engine must be quiesced (or not
// running); otherwise the error wraps ErrNotQuiesced.
func (e *Engine) Save() (State, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.checkQuiescedLocked(); err != nil {
		return State{}, err
	}
	s := State{
		RingBase:  e.r.ringBase,
		RingSize:  e.r.ringSize,
		Head:      e.r.head,
		Tail:      e.r.tail,
		Enabled:   e.r.enabled,
		FenceDone: e.r.fenceDone,
		CmdsDone:  e.r.cmdsDone,
		Kernels:   make([]KernelObject, 0, len(e.kernels)),
	}
	for h, k := range e.kernels {
		s.Kernels = append(s.Kernels, KernelObject{Handle: h, Kind: k})
	}
	slices.SortFunc(s.Kernels, func(a, b KernelObject) int { return cmp.Compare(a.Handle, b.Handle) })
	return s, nil
}

func (e *Engine) checkQuiescedLocked() error {
	if e.running && !e.quiesced {
		return fmt.Errorf("%w: the engine is running", ErrNotQuiesced)
	}
	return nil
}

// Validate checks that s is a state an engine can hold; errors wrap
// ErrBadState.
func (s State) Validate() error {
	if s.Head%abi.CmdAlign != 0 || s.Tail%abi.CmdAlign != 0 {
		return fmt.Errorf("%w: head %#x or tail %#x not %d-byte aligned", ErrBadState, s.Head, s.Tail, abi.CmdAlign)
	}
	if s.Enabled {
		if err := validRing(s.RingBase, s.RingSize); err != nil {
			return fmt.Errorf("%w: enabled ring: %v", ErrBadState, err)
		}
		if s.Head >= s.RingSize || s.Tail >= s.RingSize {
			return fmt.Errorf("%w: head %#x or tail %#x outside a %#x-byte ring", ErrBadState, s.Head, s.Tail, s.RingSize)
		}
	}
	if len(s.Kernels) > abi.MaxKernels {
		return fmt.Errorf("%w: %d kernel objects (at most %d)", ErrBadState, len(s.Kernels), abi.MaxKernels)
	}
	seen := make(map[uint32]bool, len(s.Kernels))
	for _, k := range s.Kernels {
		if k.Handle == 0 || seen[k.Handle] {
			return fmt.Errorf("%w: kernel handle %d zero or repeated", ErrBadState, k.Handle)
		}
		if _, ok := kernelArity[k.Kind]; !ok {
			return fmt.Errorf("%w: kernel %d of unknown kind %d", ErrBadState, k.Handle, k.Kind)
		}
		seen[k.Handle] = true
	}
	return nil
}

// Restore replaces the engine's state with s. The engine must be quiesced
// (or not running): the error wraps ErrNotQuiesced, or ErrBadState for an
// invalid s, and the engine is unchanged. Work between s.Head and s.Tail runs
// after Resume.
func (e *Engine) Restore(s State) error {
	if err := s.Validate(); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if err := e.checkQuiescedLocked(); err != nil {
		return err
	}
	e.r = regs{
		ringBase:  s.RingBase,
		ringSize:  s.RingSize,
		head:      s.Head,
		tail:      s.Tail,
		enabled:   s.Enabled,
		fenceDone: s.FenceDone,
		cmdsDone:  s.CmdsDone,
		gen:       e.r.gen + 1,
	}
	e.kernels = make(map[uint32]uint32, len(s.Kernels))
	for _, k := range s.Kernels {
		e.kernels[k.Handle] = k.Kind
	}
	e.log.Debug().Uint32("head", s.Head).Uint32("tail", s.Tail).Bool("enabled", s.Enabled).
		Int("kernels", len(s.Kernels)).Msg("engine: state restored")
	e.notifyIdleLocked()
	return nil
}

// Reset is the device reset of docs/device-abi.md §3: after the command in
// flight, kernel objects are destroyed, the ring is disabled and its
// registers, FENCE_DONE and CMDS_DONE are zeroed. Graphics memory is not
// touched. An engine that was quiesced stays quiesced; otherwise it resumes.
func (e *Engine) Reset() {
	e.mu.Lock()
	was := e.quiesced
	e.mu.Unlock()
	e.Quiesce()
	e.mu.Lock()
	e.r = regs{gen: e.r.gen + 1}
	e.kernels = make(map[uint32]uint32)
	e.log.Debug().Msg("engine: reset")
	e.notifyIdleLocked()
	e.mu.Unlock()
	if !was {
		e.Resume()
	}
}
