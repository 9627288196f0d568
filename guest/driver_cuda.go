package guest

import (
	"fmt"

	"github.com/gmig-dev/gmig/abi"
)

// Small additions for the guest CUDA library (guest/cudadrv).

// FenceDone reads FENCE_DONE (docs/device-abi.md §3): the value of the last
// fence that retired. Unlike Wait it never blocks, so a caller can ask
// whether a fence has retired (cuEventQuery, cuStreamQuery).
func (d *Driver) FenceDone() (uint64, error) {
	v, err := d.bus.ReadReg64(abi.RegFenceDone)
	if err != nil {
		return 0, fmt.Errorf("guest: reading FENCE_DONE: %w", err)
	}
	return v, nil
}

// FenceMem reports whether the device writes fence values to memory
// (CAPS bit 1, abi.CapFenceMem): a fence issued with abi.FenceWriteMem
// then lands in FenceSlot, where FenceSlotValue reads it without a
// register access.
func (d *Driver) FenceMem() bool { return d.caps&abi.CapFenceMem != 0 }

// ClearFenceSlot stores 0 in the fence slot through the aperture, so that
// what an earlier user of the vGPU left there is not taken for a fence of
// this driver's. Call it with no fence in flight (after Open).
func (d *Driver) ClearFenceSlot() error {
	var zero [8]byte
	if err := d.WriteGA(d.fenceSlot, zero[:]); err != nil {
		return fmt.Errorf("guest: clearing the fence slot: %w", err)
	}
	return nil
}

// FenceSlotValue loads the fence slot (FenceSlot) through the aperture
// mapping, one 8-byte load, no register access: the value of the last
// FenceWriteMem fence that retired (docs/device-abi.md §6.4; fences retire
// in order, so it only grows), or 0 before the first.
func (d *Driver) FenceSlotValue() (uint64, error) {
	off, err := d.ApertureOffset(d.fenceSlot)
	if err != nil {
		return 0, err
	}
	return loadLE64(d.bus.Aperture()[off : off+8]), nil
}

// WaitRetired is Wait for a fence the caller saw retire (FenceSlotValue
// reached value): the same checks and the same verdict — the sticky
// submission error, the doorbell for commands still unrung, ERR_STATUS as
// a *DeviceError — without reading FENCE_DONE again, so a wait that found
// its fence in memory costs one register read.
func (d *Driver) WaitRetired(value uint64) error {
	if err := d.waitable(value); err != nil {
		return err
	}
	return d.CheckErrors()
}
