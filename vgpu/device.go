package vgpu

import (
	"fmt"

	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/internal/apilog"
	"github.com/gmig-dev/gmig/vfio"
)

// configSpaceSize is the size of the PCI config region: a conventional
// (non-express) function has 256 bytes.
const configSpaceSize = 256

// Info implements vfio.Device.
func (v *VGPU) Info() vfio.DeviceInfo {
	return vfio.DeviceInfo{
		Flags:      vfio.DeviceFlagReset | vfio.DeviceFlagPCI,
		NumRegions: vfio.PCINumRegions,
		NumIRQs:    vfio.PCINumIRQs,
	}
}

// RegionInfo implements vfio.Device: BAR0 (trapped), BAR2 (the aperture,
// mmap-able from the partition's own sealed memfd at offset 0), config
// space; every other region is absent. The aperture's descriptor reaches
// this vGPU's graphics memory and nothing else (docs/device-abi.md §1.1);
// once the vGPU is closed it is no longer handed out.
func (v *VGPU) RegionInfo(index uint32) (vfio.RegionInfo, error) {
	rw := uint32(vfio.RegionFlagRead | vfio.RegionFlagWrite)
	switch {
	case index == abi.BARRegs:
		return vfio.RegionInfo{Flags: rw, Size: abi.BAR0Size}, nil
	case index == abi.BARAperture:
		ri := vfio.RegionInfo{Flags: rw | vfio.RegionFlagMmap, Size: v.cfg.MemSize, Offset: 0}
		if err := v.withMemory(func([]byte) { ri.File = v.file }); err != nil {
			return vfio.RegionInfo{}, err
		}
		return ri, nil
	case index == vfio.PCIConfigRegionIndex:
		return vfio.RegionInfo{Flags: rw, Size: configSpaceSize}, nil
	case index < vfio.PCINumRegions:
		return vfio.RegionInfo{}, nil
	}
	return vfio.RegionInfo{}, fmt.Errorf("vgpu: region %d: %w", index, unix.EINVAL)
}

// IRQInfo implements vfio.Device: one INTx line and one MSI vector.
func (v *VGPU) IRQInfo(index uint32) (vfio.IRQInfo, error) {
	switch {
	case index == vfio.PCIINTxIRQIndex:
		return vfio.IRQInfo{
			Flags: vfio.IRQInfoFlagEventfd | vfio.IRQInfoFlagMaskable | vfio.IRQInfoFlagAutomasked,
			Count: 1,
		}, nil
	case index == vfio.PCIMSIIRQIndex:
		return vfio.IRQInfo{Flags: vfio.IRQInfoFlagEventfd | vfio.IRQInfoFlagNoResize, Count: 1}, nil
	case index < vfio.PCINumIRQs:
		return vfio.IRQInfo{Flags: vfio.IRQInfoFlagEventfd}, nil
	}
	return vfio.IRQInfo{}, fmt.Errorf("vgpu: irq index %d: %w", index, unix.EINVAL)
}

// ReadRegion implements vfio.Device.
func (v *VGPU) ReadRegion(index uint32, off uint64, p []byte) error {
	switch index {
	case abi.BARRegs:
		if err := checkRange(off, len(p), abi.BAR0Size); err != nil {
			return err
		}
		return v.regs.Read(off, p)
	case abi.BARAperture:
		if err := checkRange(off, len(p), v.cfg.MemSize); err != nil {
			return err
		}
		return v.withMemory(func(mem []byte) { copy(p, mem[off:]) })
	case vfio.PCIConfigRegionIndex:
		if err := checkRange(off, len(p), configSpaceSize); err != nil {
			return err
		}
		return v.pci.Read(off, p)
	}
	return fmt.Errorf("vgpu: read of region %d: %w", index, unix.EINVAL)
}

// WriteRegion implements vfio.Device. Config writes are applied to the
// emulated config space (which records them for replay after migration),
// then the interrupt line is re-evaluated since MSI or INTx-disable may have
// changed.
func (v *VGPU) WriteRegion(index uint32, off uint64, p []byte) error {
	switch index {
	case abi.BARRegs:
		if err := checkRange(off, len(p), abi.BAR0Size); err != nil {
			return err
		}
		return v.regs.Write(off, p)
	case abi.BARAperture:
		if err := checkRange(off, len(p), v.cfg.MemSize); err != nil {
			return err
		}
		if err := v.withMemory(func(mem []byte) { copy(mem[off:], p) }); err != nil {
			return err
		}
		// A trapped store (QEMU traps the BAR while INTx is pending) is
		// gmigd's own write, which no write log of QEMU's mapping sees:
		// it is reported like the engine's, after it landed.
		if f := v.wroteHook.Load(); f != nil {
			(*f)(off, uint64(len(p)))
		}
		return nil
	case vfio.PCIConfigRegionIndex:
		if err := checkRange(off, len(p), configSpaceSize); err != nil {
			return err
		}
		if err := v.pci.Write(off, p); err != nil {
			return err
		}
		v.recordConfigWrite(off, p)
		v.regs.Renotify()
		return nil
	}
	return fmt.Errorf("vgpu: write to region %d: %w", index, unix.EINVAL)
}

// Reset implements vfio.Device: a function-level reset, which also returns
// config space to its power-on state.
func (v *VGPU) Reset() error {
	v.reset()
	v.pci.Reset()
	v.regs.Renotify()
	v.log.Info().Msg("vgpu reset by client")
	return nil
}

func checkRange(off uint64, n int, size uint64) error {
	if n == 0 || off >= size || uint64(n) > size-off {
		return fmt.Errorf("vgpu: access of %d bytes at %#x outside region of %#x bytes: %w", n, off, size, unix.EINVAL)
	}
	return nil
}

// recordConfigWrite adds a guest config write to the API log: one entry for
// an aligned 1-, 2- or 4-byte write (what QEMU sends), byte entries
// otherwise.
func (v *VGPU) recordConfigWrite(off uint64, p []byte) {
	n := len(p)
	if (n == 1 || n == 2 || n == 4) && off%uint64(n) == 0 {
		var val uint32
		for i := n - 1; i >= 0; i-- {
			val = val<<8 | uint32(p[i])
		}
		v.apiLog.Record(apilog.Entry{Kind: apilog.ConfigWrite, Offset: uint16(off), Size: uint8(n), Arg: val})
		return
	}
	for i, b := range p {
		v.apiLog.Record(apilog.Entry{Kind: apilog.ConfigWrite, Offset: uint16(off) + uint16(i), Size: 1, Arg: uint32(b)})
	}
}
