package guest

import (
	"fmt"

	"github.com/gmig-dev/gmig/abi"
)

// Device-local memory (docs/device-abi.md §1 and §3.1, ABI 1.2): memory
// only commands reach, beside the CPU-visible aperture. The guest reaches
// it through graphics addresses alone: a GTT entry with abi.GTTLocal names
// a device-local page. A graphics address is the "device address" a CUDA
// library hands out; it stays the same for the life of the allocation and
// across a migration, so allocation is purely the guest's business: the
// driver picks graphics addresses above the aperture mapping (from
// MappedSize up to the end of the GTT's address space) and local pages
// first fit, and maps one onto the other.
//
// With device addresses (ABI 1.3, CAPS bit 6, docs/device-abi.md §1.4)
// commands take DEVICE_ADDR_BASE + l for local byte l directly, so local
// memory needs no GTT mapping at all: AllocDevice hands out local byte
// offsets alone, and allocations are bounded by LOCAL_MEM_SIZE rather than
// by the GTT's 65536 entries (256 MiB for the aperture and local memory
// together).

// LocalGTTEntry builds a valid GTT entry naming device-local page page
// (docs/device-abi.md §3.1, ABI 1.2); writable adds abi.GTTWritable.
func LocalGTTEntry(page uint64, writable bool) uint64 {
	return GTTEntry(page, writable) | abi.GTTLocal
}

// LocalMemSize is the device's local memory in bytes: LOCAL_MEM_SIZE when
// CAPS announces it (abi.CapLocalMem), 0 otherwise.
func (d *Driver) LocalMemSize() uint64 { return d.localSize }

// identifyLocal reads LOCAL_MEM_SIZE on a device that announces it and
// sets up the local allocators; a device without it has none.
func (d *Driver) identifyLocal() error {
	d.localSize, d.localMap, d.localOff, d.localDev = 0, map[uint64]uint64{}, map[uint64]uint64{}, map[uint64]bool{}
	if d.caps&abi.CapLocalMem == 0 {
		return nil
	}
	n, err := d.bus.ReadReg64(abi.RegLocalMemSize)
	if err != nil {
		return fmt.Errorf("guest: reading LOCAL_MEM_SIZE: %w", err)
	}
	if n%abi.PageSize != 0 {
		return fmt.Errorf("guest: LOCAL_MEM_SIZE %#x is not a whole number of pages", n)
	}
	d.localSize = n
	return nil
}

// initLocal sets up the local allocators once the aperture mapping is
// known: graphics addresses [MappedSize, GTT_ENTRIES*4096) and local
// bytes [0, LocalMemSize).
func (d *Driver) initLocal() {
	d.localPages.init(d.localSize)
	lo, hi := d.MappedSize(), uint64(d.gttEntries)<<abi.PageShift
	d.localGA.init(0)
	if d.localSize > 0 && hi > lo {
		d.localGA.free = []span{{lo, hi}}
	}
}

// MapLocal maps the graphics page of ga (page aligned) onto device-local
// page page, writable, and checks the device took it. It is the primitive
// AllocLocal uses; a guest library that places its own allocations calls
// it directly. Mapping a page the driver already maps elsewhere replaces
// that mapping on the device.
func (d *Driver) MapLocal(ga, page uint64) error {
	if ga%abi.PageSize != 0 {
		return fmt.Errorf("guest: graphics address %#x is not page aligned", ga)
	}
	if page >= d.localSize>>abi.PageShift {
		return fmt.Errorf("guest: local page %d beyond the %#x bytes of local memory", page, d.localSize)
	}
	if err := d.bus.WriteGTT(uint32(ga>>abi.PageShift), []uint64{LocalGTTEntry(page, true)}); err != nil {
		return fmt.Errorf("guest: mapping local page %d at %#x: %w", page, ga, err)
	}
	if err := d.CheckErrors(); err != nil {
		return fmt.Errorf("guest: mapping local page %d at %#x: %w", page, ga, err)
	}
	d.localMap[ga>>abi.PageShift] = page
	return nil
}

// AllocLocal reserves n bytes (rounded up to whole pages) of device-local
// memory and maps it at a page-aligned graphics address, which it returns:
// commands (COPY, FILL, DMA, kernels) reach it there; the CPU cannot. The
// address is stable until FreeLocal. It fails with ErrNoGraphicsMemory
// when the device has no local memory, or too little is free, or no
// graphics-address range above the aperture mapping is.
func (d *Driver) AllocLocal(n uint64) (uint64, error) {
	if d.localSize == 0 {
		return 0, fmt.Errorf("%w: the device has no local memory", ErrNoGraphicsMemory)
	}
	off, err := d.localPages.alloc(n)
	if err != nil {
		return 0, err
	}
	ga, err := d.localGA.alloc(n)
	if err != nil {
		_ = d.localPages.release(off)
		return 0, err
	}
	if err := d.mapLocalRange(ga, off, pageRoundUp(n)); err != nil {
		_ = d.unmapLocal(ga, pageRoundUp(n))
		_ = d.localGA.release(ga)
		_ = d.localPages.release(off)
		return 0, err
	}
	d.localOff[ga] = off
	return ga, nil
}

// mapLocalRange maps the n bytes (whole pages) at ga onto the local pages
// from byte offset off, with one GTT write and one check of the device's
// verdict (an allocation of 256 MiB is 65536 entries).
func (d *Driver) mapLocalRange(ga, off, n uint64) error {
	entries := make([]uint64, n>>abi.PageShift)
	for i := range entries {
		entries[i] = LocalGTTEntry(off>>abi.PageShift+uint64(i), true)
	}
	if err := d.bus.WriteGTT(uint32(ga>>abi.PageShift), entries); err != nil {
		return fmt.Errorf("guest: mapping %#x bytes of local memory at %#x: %w", n, ga, err)
	}
	if err := d.CheckErrors(); err != nil {
		return fmt.Errorf("guest: mapping %#x bytes of local memory at %#x: %w", n, ga, err)
	}
	for i := range entries {
		d.localMap[ga>>abi.PageShift+uint64(i)] = off>>abi.PageShift + uint64(i)
	}
	return nil
}

// LocalOffset is the device-local byte offset of the allocation AllocLocal
// returned at ga (false for any other address): with the device address
// base (ABI 1.3) it gives the allocation's device address.
func (d *Driver) LocalOffset(ga uint64) (uint64, bool) {
	off, ok := d.localOff[ga]
	return off, ok
}

// LocalFreeBytes is the device-local memory AllocLocal has left: free local
// pages, bounded by the free graphics addresses to map them at (the GTT
// covers GTT_ENTRIES pages in all, the aperture mapping included).
func (d *Driver) LocalFreeBytes() uint64 {
	return min(d.localPages.freeBytes(), d.localGA.freeBytes())
}

// FreeLocal unmaps an allocation AllocLocal made and returns its graphics
// addresses and local pages.
func (d *Driver) FreeLocal(ga uint64) error {
	n, ok := d.localGA.used[ga]
	if !ok {
		return fmt.Errorf("guest: freeing local %#x, which is not a local allocation", ga)
	}
	if err := d.unmapLocal(ga, n); err != nil {
		return err
	}
	if err := d.localGA.release(ga); err != nil {
		return err
	}
	off := d.localOff[ga]
	delete(d.localOff, ga)
	return d.localPages.release(off)
}

// unmapLocal writes 0 to the entries of [ga, ga+n).
func (d *Driver) unmapLocal(ga, n uint64) error {
	if n == 0 {
		return nil
	}
	first := uint32(ga >> abi.PageShift)
	if err := d.bus.WriteGTT(first, make([]uint64, n>>abi.PageShift)); err != nil {
		return fmt.Errorf("guest: unmapping local memory at %#x: %w", ga, err)
	}
	for p := ga >> abi.PageShift; p < (ga+n)>>abi.PageShift; p++ {
		delete(d.localMap, p)
	}
	return nil
}

// remapLocal writes every local mapping again (after a device reset).
func (d *Driver) remapLocal() error {
	for gp, page := range d.localMap {
		if err := d.bus.WriteGTT(uint32(gp), []uint64{LocalGTTEntry(page, true)}); err != nil {
			return fmt.Errorf("guest: restoring local mapping at %#x: %w", gp<<abi.PageShift, err)
		}
	}
	return d.CheckErrors()
}

// DeviceAddrs reports whether the device has device addresses (CAPS bit 6,
// ABI 1.3): commands then reach local byte l at DEVICE_ADDR_BASE + l.
func (d *Driver) DeviceAddrs() bool {
	return d.caps&abi.CapDeviceAddr != 0 && d.localSize > 0
}

// AllocDevice reserves n bytes (rounded up to whole pages) of device-local
// memory, first fit, without mapping it in the GTT, and returns its local
// byte offset: commands reach it at DEVICE_ADDR_BASE + offset (ABI 1.3).
// It fails with ErrNoGraphicsMemory when too little local memory is free,
// and needs a device with device addresses (DeviceAddrs).
func (d *Driver) AllocDevice(n uint64) (uint64, error) {
	if !d.DeviceAddrs() {
		return 0, fmt.Errorf("%w: the device has no device addresses", ErrNoGraphicsMemory)
	}
	off, err := d.localPages.alloc(n)
	if err != nil {
		return 0, err
	}
	d.localDev[off] = true
	return off, nil
}

// FreeDevice returns the local memory AllocDevice reserved at offset off.
func (d *Driver) FreeDevice(off uint64) error {
	if !d.localDev[off] {
		return fmt.Errorf("guest: freeing local offset %#x, which AllocDevice did not return", off)
	}
	delete(d.localDev, off)
	return d.localPages.release(off)
}

// DeviceFreeBytes is the device-local memory AllocDevice has left (every
// free local page: no GTT entries are needed).
func (d *Driver) DeviceFreeBytes() uint64 { return d.localPages.freeBytes() }
