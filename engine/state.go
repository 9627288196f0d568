package engine

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"time"

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
	// Modules are the guest modules among Kernels (kind abi.KernelModule),
	// sorted by handle, with what it takes to load them again (ABI 1.1).
	Modules []Module
	// DeviceVA is where the back end placed graphics memory in device
	// virtual addresses (0: no device addresses); a restoring engine asks
	// its back end for the same address (Backend.Place).
	DeviceVA uint64
	// DeviceAddrBase is the device address of device-local byte 0
	// (Backend.DeviceAddrBase, ABI 1.3; 0 without local memory). A
	// restoring engine's back end must already be there (the vGPU asks its
	// back end for it first): Restore refuses another value with
	// ErrDeviceAddr.
	DeviceAddrBase uint64
	// Streams are the streams with a fence or an error (ABI 1.2,
	// Config.Streams), by id.
	Streams []StreamState
}

// ErrDeviceAddr reports a state whose device-local memory is at another
// device address than the restoring back end's (RegDeviceAddrBase must not
// change under the guest, ABI 1.3): the back end could not be placed there,
// so the restore, and a migration with it, is refused.
var ErrDeviceAddr = errors.New("engine: device-local memory is not at the saved device address")

// KernelObject is one loaded kernel object (§6.5).
type KernelObject struct {
	Handle uint32
	Kind   uint32
}

// Save returns the engine's state. The engine must be quiesced (or not
// running); otherwise the error wraps ErrNotQuiesced.
func (e *Engine) Save() (State, error) {
	va, err := e.cfg.Backend.Place(0) // asks nothing: where graphics memory is
	if err != nil {
		return State{}, fmt.Errorf("engine: device placement: %w", err)
	}
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
	if len(e.modules) > 0 {
		s.Modules = sortedModules(e.modules)
	}
	s.DeviceVA = va
	s.DeviceAddrBase = e.cfg.Backend.DeviceAddrBase()
	s.Streams = e.r.saveStreams()
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
	if err := validateStreams(s.Streams); err != nil {
		return err
	}
	if len(s.Kernels) > abi.MaxKernels {
		return fmt.Errorf("%w: %d kernel objects (at most %d)", ErrBadState, len(s.Kernels), abi.MaxKernels)
	}
	seen := make(map[uint32]bool, len(s.Kernels))
	for _, k := range s.Kernels {
		if k.Handle == 0 || seen[k.Handle] {
			return fmt.Errorf("%w: kernel handle %d zero or repeated", ErrBadState, k.Handle)
		}
		if _, ok := kernelArity[k.Kind]; !ok && k.Kind != abi.KernelModule {
			return fmt.Errorf("%w: kernel %d of unknown kind %d", ErrBadState, k.Handle, k.Kind)
		}
		seen[k.Handle] = true
	}
	return s.validateModules()
}

// validateModules checks that Modules are exactly the kernel objects of
// kind abi.KernelModule, each well formed.
func (s State) validateModules() error {
	kinds := make(map[uint32]uint32, len(s.Kernels))
	want := 0
	for _, k := range s.Kernels {
		kinds[k.Handle] = k.Kind
		if k.Kind == abi.KernelModule {
			want++
		}
	}
	if len(s.Modules) != want {
		return fmt.Errorf("%w: %d guest modules for %d module kernel objects", ErrBadState, len(s.Modules), want)
	}
	for _, m := range s.Modules {
		switch {
		case kinds[m.Handle] != abi.KernelModule:
			return fmt.Errorf("%w: module %d is not a module kernel object", ErrBadState, m.Handle)
		case m.Entry == "" || len(m.Entry) > abi.ModuleMaxEntry || len(m.PTX) == 0 || len(m.PTX) > abi.ModuleMaxImage:
			return fmt.Errorf("%w: module %d malformed", ErrBadState, m.Handle)
		case m.Args == 0 || m.Args > abi.LaunchMaxArgs:
			return fmt.Errorf("%w: module %d takes %d arguments", ErrBadState, m.Handle, m.Args)
		}
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
	if len(s.Streams) > 0 && !e.cfg.Streams {
		return fmt.Errorf("%w: %d streams for an engine without streams", ErrBadState, len(s.Streams))
	}
	if have := e.cfg.Backend.DeviceAddrBase(); have != s.DeviceAddrBase {
		return fmt.Errorf("%w: %w: device-local memory at %#x, the state's is at %#x",
			ErrBadState, ErrDeviceAddr, have, s.DeviceAddrBase)
	}
	e.mu.Lock()
	err := e.checkQuiescedLocked()
	old := e.modules
	e.mu.Unlock()
	if err != nil {
		return err
	}
	if err := e.restoreModules(s, old); err != nil {
		return err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
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
	for _, st := range s.Streams {
		e.r.streams[st.ID] = streamReg{fence: st.Fence, err: st.Err}
	}
	e.kernels = make(map[uint32]uint32, len(s.Kernels))
	for _, k := range s.Kernels {
		e.kernels[k.Handle] = k.Kind
	}
	e.modules = make(map[uint32]Module, len(s.Modules))
	for _, m := range s.Modules {
		e.modules[m.Handle] = m
	}
	e.layouts = make(map[uint32]paramLayout)
	e.log.Debug().Uint32("head", s.Head).Uint32("tail", s.Tail).Bool("enabled", s.Enabled).
		Int("kernels", len(s.Kernels)).Msg("engine: state restored")
	e.notifyIdleLocked()
	return nil
}

// Reset is the device reset of docs/device-abi.md §3: after the command in
// flight, kernel objects are destroyed, the ring is disabled and its
// registers, FENCE_DONE and CMDS_DONE are zeroed. Graphics memory is not
// touched. It leaves Quiesce and Resume's state alone: a quiesced engine
// stays quiesced, a running one runs on, and a Quiesce that races with the
// reset holds (the reset is done by the engine goroutine between
// commands, not by parking and unparking it).
func (e *Engine) Reset() { e.between(e.resetNow) }

func (e *Engine) resetNow() {
	e.syncBackend()
	e.mu.Lock()
	mods := e.modules
	e.modules = make(map[uint32]Module)
	e.layouts = make(map[uint32]paramLayout)
	e.lastGrid = gridLaunch{}
	e.mu.Unlock()
	e.unloadModules(mods)
	e.mu.Lock()
	e.r = regs{gen: e.r.gen + 1}
	e.kernels = make(map[uint32]uint32)
	e.log.Debug().Msg("engine: reset")
	e.notifyIdleLocked()
	e.mu.Unlock()
}

// restoreModules replaces the back end's guest modules with s's:
// it asks for s's device placement, unloads the current modules and
// loads s's under their handles (the back end's own objects are new: the
// guest's handles are remapped onto them). On failure the old modules are
// loaded back and the error wraps ErrBadState: a state with guest modules
// cannot be restored onto a back end that does not run them. Called with
// the engine quiesced (so nothing else uses the back end) and without mu;
// old are the engine's current modules.
func (e *Engine) restoreModules(s State, old map[uint32]Module) error {
	if s.DeviceVA != 0 {
		va, err := e.cfg.Backend.Place(s.DeviceVA)
		if err != nil {
			return fmt.Errorf("%w: placing graphics memory at %#x: %w", ErrBadState, s.DeviceVA, err)
		}
		if va != s.DeviceVA && len(s.Modules) > 0 {
			e.log.Warn().Uint64("source_va", s.DeviceVA).Uint64("va", va).
				Msg("engine: graphics memory moved on the device; device pointers guest kernels stored in it are stale (docs/nvidia.md)")
		}
	}
	if len(s.Modules) == 0 && len(old) == 0 {
		return nil
	}
	e.unloadModules(old)
	t := time.Now()
	defer func() {
		e.log.Info().Int("modules", len(s.Modules)).Dur("took", time.Since(t)).Msg("engine: guest modules loaded for the restored state")
	}()
	for i, m := range s.Modules {
		if err := e.cfg.Backend.LoadModule(m.Handle, m); err != nil {
			for _, l := range s.Modules[:i] {
				_ = e.cfg.Backend.UnloadModule(l.Handle)
			}
			for _, o := range sortedModules(old) {
				_ = e.cfg.Backend.LoadModule(o.Handle, o)
			}
			return fmt.Errorf("%w: guest module %d: %w", ErrBadState, m.Handle, err)
		}
	}
	return nil
}

// unloadModules unloads ms from the back end (without mu).
func (e *Engine) unloadModules(ms map[uint32]Module) {
	for h := range ms {
		if err := e.cfg.Backend.UnloadModule(h); err != nil {
			e.log.Warn().Err(err).Uint32("handle", h).Msg("engine: unloading a guest module")
		}
	}
}
