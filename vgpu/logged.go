package vgpu

import (
	"cmp"
	"errors"
	"fmt"
	"slices"

	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/internal/apilog"
)

// What the API log carries and what the saved State carries are decided
// here, in one place (docs/migration-stream.md §8 and §11): kernel objects,
// FENCE_DONE and INT_STATUS/INT_MASK travel only as log entries (Device);
// the guest's PCI config writes travel as log entries too (FrontEnd), for
// the destination's VMM front end, which does not migrate them; everything
// else travels in the State.

// Migrated is a vGPU's non-memory state as a migration moves it.
type Migrated struct {
	// State is Save's State with what Device carries zeroed.
	State State
	// Device is the compacted log's kernel, fence and interrupt entries.
	Device []apilog.Entry
	// FrontEnd is the compacted log's config writes, in replay order.
	FrontEnd []apilog.Entry
	// Log compares what the API log recorded with what it keeps.
	Log apilog.Stats
}

// ErrLogMismatch reports an API log that does not describe the device it
// recorded: a recording bug. Migrating would lose state, so the source
// refuses (and rolls back).
var ErrLogMismatch = errors.New("vgpu: API log disagrees with the device")

// SaveMigrated returns the vGPU's state split for a migration. The vGPU
// must be quiesced. It checks that the log's device entries describe the
// state exactly before removing what they carry from it.
func (v *VGPU) SaveMigrated() (Migrated, error) {
	st, err := v.Save()
	if err != nil {
		return Migrated{}, err
	}
	m := Migrated{Log: v.apiLog.Stats()}
	for _, e := range v.apiLog.Compacted() {
		if e.Kind == apilog.ConfigWrite {
			m.FrontEnd = append(m.FrontEnd, e)
		} else {
			m.Device = append(m.Device, e)
		}
	}
	if err := stripLogged(&st, m.Device); err != nil {
		return Migrated{}, fmt.Errorf("vgpu %s: %w", v.cfg.Name, err)
	}
	m.State = st
	return m, nil
}

// ConfigWrites returns the guest's PCI config writes recorded in the API
// log, compacted and in replay order: what a destination's front end must
// be given back.
func (v *VGPU) ConfigWrites() []apilog.Entry {
	var out []apilog.Entry
	for _, e := range v.apiLog.Compacted() {
		if e.Kind == apilog.ConfigWrite {
			out = append(out, e)
		}
	}
	return out
}

// ApplyLog replays a migration's device entries into its state: the
// destination's half of the split SaveMigrated made. Config writes do not
// belong there and are refused.
func ApplyLog(st *State, device []apilog.Entry) error {
	if err := apilog.Replay(device, &stateTarget{st: st}); err != nil {
		return fmt.Errorf("vgpu: replaying the API log: %w", err)
	}
	sortKernels(st.Engine.Kernels)
	return nil
}

// RestoreMigrated restores m (its device entries already applied with
// ApplyLog) and records m's entries in this vGPU's API log, which then
// describes the vGPU as the source's did, so it can migrate again. The
// vGPU must be quiesced; it stays quiesced. On error nothing changes.
func (v *VGPU) RestoreMigrated(m Migrated) error {
	if err := v.Restore(m.State); err != nil {
		return err
	}
	v.apiLog.Reset()
	for _, es := range [][]apilog.Entry{m.Device, m.FrontEnd} {
		for _, e := range es {
			v.apiLog.Record(e)
		}
	}
	return nil
}

// stripLogged checks that the log's device entries describe st exactly,
// then removes what they carry from st, so that on the destination the
// replayed log is the only source of kernel objects, FENCE_DONE and the
// interrupt registers.
func stripLogged(st *State, device []apilog.Entry) error {
	var l State // what the log alone describes
	if err := ApplyLog(&l, device); err != nil {
		return fmt.Errorf("%w: %w", ErrLogMismatch, err)
	}
	le, lr := l.Engine, l.Regs
	switch {
	case !slices.Equal(le.Kernels, st.Engine.Kernels) && len(le.Kernels)+len(st.Engine.Kernels) != 0:
		return fmt.Errorf("%w: log holds kernels %v, device %v", ErrLogMismatch, le.Kernels, st.Engine.Kernels)
	case le.FenceDone != st.Engine.FenceDone:
		return fmt.Errorf("%w: log holds fence %d, device FENCE_DONE %d", ErrLogMismatch, le.FenceDone, st.Engine.FenceDone)
	case lr.IntStatus != st.Regs.IntStatus || lr.IntMask != st.Regs.IntMask:
		return fmt.Errorf("%w: log holds interrupts %#x/%#x, device INT_STATUS/INT_MASK %#x/%#x",
			ErrLogMismatch, lr.IntStatus, lr.IntMask, st.Regs.IntStatus, st.Regs.IntMask)
	}
	st.Engine.Kernels = nil
	st.Engine.FenceDone = 0
	st.Regs.IntStatus, st.Regs.IntMask = 0, 0
	return nil
}

// stateTarget replays device entries into a State.
type stateTarget struct{ st *State }

func (t *stateTarget) LoadKernel(handle, kind uint32) error {
	t.st.Engine.Kernels = append(t.st.Engine.Kernels, engine.KernelObject{Handle: handle, Kind: kind})
	return nil
}

func (t *stateTarget) SetFenceDone(value uint64) error {
	t.st.Engine.FenceDone = value
	return nil
}

func (t *stateTarget) SetInterrupts(status, mask uint32) error {
	t.st.Regs.IntStatus, t.st.Regs.IntMask = status, mask
	return nil
}

func (t *stateTarget) WriteConfig(offset uint16, size uint8, _ uint32) error {
	return fmt.Errorf("config write %#x/%d among the device entries (it belongs to the front end)", offset, size)
}

func sortKernels(ks []engine.KernelObject) {
	slices.SortFunc(ks, func(a, b engine.KernelObject) int { return cmp.Compare(a.Handle, b.Handle) })
}
