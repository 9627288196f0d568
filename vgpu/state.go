package vgpu

import (
	"errors"
	"fmt"
	"time"

	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/gtt"
	"github.com/gmig-dev/gmig/internal/pci"
	"github.com/gmig-dev/gmig/mmio"
)

// StateVersion is the version of State; a changed layout gets a new number,
// and Restore refuses versions it does not know. Version 2 holds the vGPU's
// whole Spec where version 1 had only its memory size and GTT entries;
// version 1 is refused (stateV1): it cannot say which back end and CAPS the
// guest had.
const StateVersion = 2

// stateV1 is the version State had before it held the Spec.
const stateV1 = 1

// State is a vGPU's whole non-memory state as plain data: no fds, no memory,
// no host offsets. Graphics memory is the partition's bytes and travels
// separately.
type State struct {
	Version uint32
	Spec    Spec // the vGPU this is the state of
	PCI     pci.State
	Regs    mmio.State
	GTT     gtt.State
	Engine  engine.State
}

// ErrState reports a State that cannot be restored here.
var ErrState = errors.New("vgpu: unusable state")

// Quiesce stops the engine taking doorbells and waits for the command in
// flight to finish. Doorbells that arrive meanwhile are recorded.
func (v *VGPU) Quiesce() { v.eng.Quiesce() }

// Resume lets the engine continue with any recorded work.
func (v *VGPU) Resume() { v.eng.Resume() }

// Save returns the vGPU's state. The vGPU must be quiesced.
func (v *VGPU) Save() (State, error) {
	es, err := v.eng.Save()
	if err != nil {
		return State{}, fmt.Errorf("vgpu %s: saving engine: %w", v.cfg.Name, err)
	}
	return State{
		Version: StateVersion,
		Spec:    v.Spec(),
		PCI:     v.pci.Save(),
		Regs:    v.regs.Save(),
		GTT:     v.gtt.Save(),
		Engine:  es,
	}, nil
}

// Restore replaces this vGPU's state with s. The vGPU must be quiesced; it
// stays quiesced. A state that does not fit is refused and nothing changes.
func (v *VGPU) Restore(s State) error {
	switch s.Version {
	case StateVersion:
	case stateV1:
		return fmt.Errorf("%w: version %d, want %d: a version %d state does not say the vGPU's back end and CAPS (both ends must run a gmig of state version %d)",
			ErrState, s.Version, StateVersion, stateV1, StateVersion)
	default:
		return fmt.Errorf("%w: version %d, want %d", ErrState, s.Version, StateVersion)
	}
	if err := v.Is(s.Spec); err != nil {
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	// Check every part before changing any.
	oldGTT := v.gtt.Save()
	if err := v.gtt.Restore(s.GTT); err != nil {
		return fmt.Errorf("%w: GTT: %w", ErrState, err)
	}
	oldPCI := v.pci.Save()
	if err := v.pci.Restore(s.PCI); err != nil {
		_ = v.gtt.Restore(oldGTT)
		return fmt.Errorf("%w: config space: %w", ErrState, err)
	}
	// Device-local memory goes to the saved device address first: the
	// engine's restore checks that it is there (ABI 1.3).
	var oldBase uint64 // placeLocal moves only the cuda back end's
	if v.gpu != nil {
		oldBase = v.gpu.DeviceAddrBase()
	}
	t0 := time.Now()
	if err := v.placeLocal(s.Engine.DeviceAddrBase); err != nil {
		_ = v.gtt.Restore(oldGTT)
		_ = v.pci.Restore(oldPCI)
		return fmt.Errorf("%w: %w", ErrState, err)
	}
	t1 := time.Now()
	if err := v.eng.Restore(s.Engine); err != nil {
		_ = v.placeLocal(oldBase)
		_ = v.gtt.Restore(oldGTT)
		_ = v.pci.Restore(oldPCI)
		return fmt.Errorf("%w: engine: %w", ErrState, err)
	}
	t2 := time.Now()
	v.regs.Restore(s.Regs)
	v.log.Info().Uint64("pool_offset", v.part.Offset).Dur("place_local", t1.Sub(t0)).Dur("engine", t2.Sub(t1)).
		Int("modules", len(s.Engine.Modules)).Msg("vgpu state restored")
	return nil
}

// reset is the device reset of docs/device-abi.md §3: registers, GTT and
// engine state return to power-on values; graphics memory and config space
// are kept.
func (v *VGPU) reset() {
	v.eng.Reset()
	v.gtt.Reset()
	v.regs.Reset()
	v.apiLog.Reset()
}
