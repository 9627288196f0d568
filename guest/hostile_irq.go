package guest

import (
	"context"
	"errors"
	"fmt"

	"github.com/gmig-dev/gmig/abi"
)

// attackIRQ storms the interrupt line: fences that each interrupt, a batch
// of commands that each raise the error interrupt, INT_MASK toggled and
// INT_STATUS written at random, and writes to read-only registers, which
// must keep their values.
func (h *Hostile) attackIRQ(ctx context.Context) error {
	d, bus := h.d, h.d.bus
	// A wait that ends without the device's answer (ctx ended, the
	// transport failed) ends the attack: what follows would misread it.
	var errs uncontained
	if err := bus.WriteReg32(abi.RegIntMask, abi.IntFence|abi.IntError); err != nil {
		return err
	}
	var v uint64
	for range 256 {
		v = d.Fence(abi.FenceInterrupt)
	}
	if err := errs.add(h.refused("256 interrupting fences", d.Wait(ctx, v), 0)); err != nil {
		return err
	}
	if done, err := bus.ReadReg64(abi.RegFenceDone); err != nil {
		return err
	} else if done != v {
		errs.add(h.record("256 interrupting fences", false, fmt.Sprintf("FENCE_DONE %d, want %d", done, v)))
	}
	for range 64 {
		if err := d.DMAToGfx(h.scratch, 1<<44, 8); err != nil {
			return err
		}
	}
	if err := errs.add(h.refused("64 error interrupts", d.Sync(ctx), abi.ErrDMA)); err != nil {
		return err
	}
	for range 128 {
		if err := bus.WriteReg32(abi.RegIntMask, h.rng.Uint32()); err != nil {
			return err
		}
		if err := bus.WriteReg32(abi.RegIntStatus, h.rng.Uint32()); err != nil {
			return err
		}
	}
	if err := errs.add(h.readOnly()); err != nil {
		return err
	}
	if err := bus.WriteReg32(abi.RegIntMask, abi.IntFence|abi.IntError); err != nil {
		return err
	}
	if err := bus.WriteReg32(abi.RegIntStatus, ^uint32(0)); err != nil {
		return err
	}
	if err := errs.add(h.refused("a fence after the storm", d.Sync(ctx), 0)); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// readOnly writes random values to the read-only registers; each keeps
// its value.
func (h *Hostile) readOnly() error {
	bus := h.d.bus
	regs := []uint32{abi.RegID, abi.RegVersion, abi.RegCaps, abi.RegGTTEntries, abi.RegGTTOffset, abi.RegRingHead, abi.RegRingTail}
	var before []uint32
	for _, r := range regs {
		v, err := bus.ReadReg32(r)
		if err != nil {
			return err
		}
		before = append(before, v)
	}
	mem, err := bus.ReadReg64(abi.RegMemSize)
	if err != nil {
		return err
	}
	for _, r := range regs {
		if err := bus.WriteReg32(r, h.rng.Uint32()); err != nil {
			return err
		}
	}
	for _, r := range []uint32{abi.RegMemSize, abi.RegFenceDone, abi.RegCmdsDone} {
		if err := bus.WriteReg64(r, h.rng.Uint64()); err != nil {
			return err
		}
	}
	var errs []error
	for i, r := range regs {
		v, err := bus.ReadReg32(r)
		if err != nil {
			return err
		}
		errs = append(errs, h.record(fmt.Sprintf("a write to read-only register %#x", r), v == before[i], fmt.Sprintf("now %#x, was %#x", v, before[i])))
	}
	got, err := bus.ReadReg64(abi.RegMemSize)
	if err != nil {
		return err
	}
	errs = append(errs, h.record("a write to MEM_SIZE", got == mem, fmt.Sprintf("now %#x, was %#x", got, mem)))
	if done, err := bus.ReadReg64(abi.RegFenceDone); err != nil {
		return err
	} else {
		errs = append(errs, h.record("a write to FENCE_DONE", done == h.d.fence, fmt.Sprintf("now %d, want %d", done, h.d.fence)))
	}
	// A misaligned access reads as all ones and sets MMIO; a bus that
	// refuses it itself (a real guest's mapping) is just as good.
	if v, err := bus.ReadReg32(abi.RegScratch + 2); err == nil {
		cerr := h.d.CheckErrors()
		var de *DeviceError
		errs = append(errs, h.record("a misaligned register read", v == ^uint32(0) && errors.As(cerr, &de) && de.Has(abi.ErrMMIO), fmt.Sprintf("%#x, %v", v, cerr)))
	}
	return errors.Join(errs...)
}

// attackReset fills the ring with FILLs of scratch, rings the doorbell and
// resets the device at once, in the middle of the batch. After the reset
// the device must be in its reset state (ring disabled, GTT empty, no
// fence), a doorbell is refused, and scratch holds, byte for byte, its old
// value or one of the FILLs' patterns: nothing else wrote it. The driver
// then brings the device back up.
func (h *Hostile) attackReset(ctx context.Context) error {
	d, bus := h.d, h.d.bus
	const pieces = hostileScratch / abi.PageSize
	patterns := make([][]uint32, pieces)
	for range 512 {
		i := h.rng.IntN(pieces)
		p := h.rng.Uint32()
		if err := d.Fill(h.scratch+uint64(i)*abi.PageSize, abi.PageSize, p); err != nil {
			return err
		}
		patterns[i] = append(patterns[i], p)
	}
	if err := d.Flush(); err != nil {
		return err
	}
	if err := bus.WriteReg32(abi.RegControl, abi.ControlReset); err != nil {
		return err
	}
	h.count(func(s *HostileStats) { s.Resets++ })
	var errs []error
	_, off, _ := h.spareEntry()
	st, err := bus.ReadReg32(abi.RegStatus)
	if err != nil {
		return err
	}
	entry, err := bus.ReadReg64(off)
	if err != nil {
		return err
	}
	done, err := bus.ReadReg64(abi.RegFenceDone)
	if err != nil {
		return err
	}
	errs = append(errs, h.record("a reset in the middle of a batch", st&abi.StatusEnabled == 0 && entry == 0 && done == 0,
		fmt.Sprintf("STATUS %#x, GTT entry %#x, FENCE_DONE %d", st, entry, done)))
	if err := bus.WriteReg32(abi.RegDoorbell, 64); err != nil {
		return err
	}
	cerr := d.CheckErrors()
	var de *DeviceError
	errs = append(errs, h.record("a doorbell after the reset", errors.As(cerr, &de) && de.Has(abi.ErrDoorbell), fmt.Sprint(cerr)))
	if err := d.Reset(); err != nil {
		return err
	}
	got := make([]byte, hostileScratch)
	if err := d.ReadGA(h.scratch, got); err != nil {
		return err
	}
	for j := range got {
		if got[j] == h.model[j] || fromPatterns(got[j], j, patterns[j/abi.PageSize]) {
			continue
		}
		errs = append(errs, h.record("scratch after the reset", false, fmt.Sprintf("byte %#x is %#02x, neither its old value nor a FILL's", j, got[j])))
		break
	}
	copy(h.model, got)
	return errors.Join(errs...)
}

// fromPatterns reports whether byte b at offset j could be a FILL's with
// one of patterns.
func fromPatterns(b byte, j int, patterns []uint32) bool {
	for _, p := range patterns {
		if byte(p>>(8*(j%4))) == b {
			return true
		}
	}
	return false
}
