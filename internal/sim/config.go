package sim

import (
	"encoding/binary"
	"fmt"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/vfio"
)

// PCI configuration space offsets and bits (PCI Local Bus Specification
// 3.0, §6.1-6.2 and §6.8.1).
const (
	cfgVendorID   = 0x00
	cfgCommand    = 0x04
	cfgStatus     = 0x06
	cfgBAR0       = 0x10
	cfgCapPtr     = 0x34
	cfgIntLine    = 0x3c
	statusCapList = 1 << 4
	cmdMemory     = 1 << 1
	cmdBusMaster  = 1 << 2
	capIDMSI      = 0x05
	msiEnable     = 1 << 0
	msi64Bit      = 1 << 7
)

// Addresses the simulated firmware assigns: BAR0 below 4 GiB, the 64-bit
// aperture above, and the x86 MSI window.
const (
	bar0Address  = 0xfe000000
	bar2Address  = 0x8000000000
	msiAddress   = 0xfee00000
	msiData      = 0x4041
	intLineValue = 11
)

func (b *Bus) cfgRead(off uint64, n int) (uint32, error) {
	p := make([]byte, 4)
	if err := b.c.ReadRegion(vfio.PCIConfigRegionIndex, off, p[:n]); err != nil {
		return 0, fmt.Errorf("sim: reading config %#x: %w", off, err)
	}
	return binary.LittleEndian.Uint32(p), nil
}

func (b *Bus) cfgWrite(off uint64, n int, v uint32) error {
	p := binary.LittleEndian.AppendUint32(nil, v)
	if err := b.c.WriteRegion(vfio.PCIConfigRegionIndex, off, p[:n]); err != nil {
		return fmt.Errorf("sim: writing config %#x: %w", off, err)
	}
	return nil
}

// probeBAR sizes BAR i the way firmware does (write all ones, read the
// mask back) and returns the size it decodes.
func (b *Bus) probeBAR(i int, mem64 bool) (uint64, error) {
	off := uint64(cfgBAR0 + 4*i)
	if err := b.cfgWrite(off, 4, 0xffffffff); err != nil {
		return 0, err
	}
	lo, err := b.cfgRead(off, 4)
	if err != nil {
		return 0, err
	}
	mask := uint64(lo &^ 0xf)
	if mem64 {
		if err := b.cfgWrite(off+4, 4, 0xffffffff); err != nil {
			return 0, err
		}
		hi, err := b.cfgRead(off+4, 4)
		if err != nil {
			return 0, err
		}
		mask |= uint64(hi) << 32
	} else {
		mask |= 0xffffffff00000000
	}
	return ^mask + 1, nil
}

// programConfig checks the PCI identity, sizes and places BAR0 and BAR2,
// sets the interrupt line and enables memory decoding and bus mastering.
func (b *Bus) programConfig() error {
	id, err := b.cfgRead(cfgVendorID, 4)
	if err != nil {
		return err
	}
	if id != abi.PCIDeviceID<<16|abi.PCIVendorID {
		return fmt.Errorf("sim: PCI ID %08x, want %04x:%04x", id, abi.PCIVendorID, abi.PCIDeviceID)
	}
	if size, err := b.probeBAR(abi.BARRegs, false); err != nil {
		return err
	} else if size != abi.BAR0Size {
		return fmt.Errorf("sim: BAR0 decodes %#x bytes, want %#x", size, abi.BAR0Size)
	}
	if err := b.cfgWrite(cfgBAR0, 4, bar0Address); err != nil {
		return err
	}
	if size, err := b.probeBAR(abi.BARAperture, true); err != nil {
		return err
	} else if size != b.apertureSize {
		return fmt.Errorf("sim: BAR2 decodes %#x bytes, region is %#x", size, b.apertureSize)
	}
	bar2 := uint64(cfgBAR0 + 4*abi.BARAperture)
	if err := b.cfgWrite(bar2, 4, uint32(bar2Address&0xffffffff)); err != nil {
		return err
	}
	if err := b.cfgWrite(bar2+4, 4, uint32(bar2Address>>32)); err != nil {
		return err
	}
	if err := b.cfgWrite(cfgIntLine, 1, intLineValue); err != nil {
		return err
	}
	return b.cfgWrite(cfgCommand, 2, cmdMemory|cmdBusMaster)
}

// findMSI walks the capability list for the MSI capability.
func (b *Bus) findMSI() (uint64, error) {
	st, err := b.cfgRead(cfgStatus, 2)
	if err != nil {
		return 0, err
	}
	if st&statusCapList == 0 {
		return 0, fmt.Errorf("sim: device has no capability list")
	}
	ptr, err := b.cfgRead(cfgCapPtr, 1)
	if err != nil {
		return 0, err
	}
	for hops := 0; ptr != 0 && hops < 48; hops++ {
		hdr, err := b.cfgRead(uint64(ptr&^3), 2)
		if err != nil {
			return 0, err
		}
		if hdr&0xff == capIDMSI {
			return uint64(ptr &^ 3), nil
		}
		ptr = hdr >> 8
	}
	return 0, fmt.Errorf("sim: device has no MSI capability")
}

// enableMSI programs the MSI address and data and sets the enable bit.
func (b *Bus) enableMSI() error {
	msi, err := b.findMSI()
	if err != nil {
		return err
	}
	ctl, err := b.cfgRead(msi+2, 2)
	if err != nil {
		return err
	}
	dataOff := uint64(8)
	if err := b.cfgWrite(msi+4, 4, msiAddress); err != nil {
		return err
	}
	if ctl&msi64Bit != 0 {
		if err := b.cfgWrite(msi+8, 4, 0); err != nil {
			return err
		}
		dataOff = 12
	}
	if err := b.cfgWrite(msi+dataOff, 2, msiData); err != nil {
		return err
	}
	return b.cfgWrite(msi+2, 2, ctl|msiEnable)
}
