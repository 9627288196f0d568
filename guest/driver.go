package guest

import (
	"errors"
	"fmt"
	"time"

	"github.com/gmig-dev/gmig/abi"
)

// Options configure a Driver.
type Options struct {
	// Seed seeds the permutation of graphics pages onto aperture pages.
	Seed int64
	// RingSize is the command ring in bytes: a power of two in
	// abi.RingMinSize..abi.RingMaxSize; 0 means DefaultRingSize.
	RingSize uint32
	// UseIRQ makes Wait sleep on the interrupt line instead of polling.
	UseIRQ bool
	// Timeout bounds waits for ring space; 0 means DefaultTimeout.
	Timeout time.Duration
	// StagingSize is the DMA staging buffer Upload and Download use, in
	// bytes; 0 means DefaultStagingSize. Without bus DMA memory there is
	// none.
	StagingSize uint64
}

// Defaults for Options.
const (
	DefaultRingSize    = 64 << 10
	DefaultTimeout     = 10 * time.Second
	DefaultStagingSize = 1 << 20
)

func (o Options) withDefaults() (Options, error) {
	if o.RingSize == 0 {
		o.RingSize = DefaultRingSize
	}
	if o.RingSize < abi.RingMinSize || o.RingSize > abi.RingMaxSize || o.RingSize&(o.RingSize-1) != 0 {
		return o, fmt.Errorf("guest: ring size %#x is not a power of two in [%#x, %#x]",
			o.RingSize, abi.RingMinSize, abi.RingMaxSize)
	}
	if o.Timeout == 0 {
		o.Timeout = DefaultTimeout
	}
	if o.StagingSize == 0 {
		o.StagingSize = DefaultStagingSize
	}
	o.StagingSize = pageRoundUp(o.StagingSize)
	return o, nil
}

// Driver drives one vGPU over a Bus. See the package comment for its
// concurrency contract.
type Driver struct {
	bus  Bus
	opts Options

	caps       uint32
	memSize    uint64
	gttEntries uint32

	perm  []uint32 // graphics page -> aperture page, for mapped graphics pages
	alloc allocator

	localSize  uint64            // LOCAL_MEM_SIZE, 0 without abi.CapLocalMem (local.go)
	localPages allocator         // byte offsets of device-local memory
	localGA    allocator         // graphics addresses above the aperture mapping
	localMap   map[uint64]uint64 // graphics page -> local page, as mapped
	localOff   map[uint64]uint64 // AllocLocal's graphics address -> its local offset
	localDev   map[uint64]bool   // AllocDevice's local offsets (no GTT mapping)

	stream uint8 // the stream commands go on (stream.go)

	ringBase uint64
	ringSize uint32
	tail     uint32 // where the next command goes
	flushed  uint32 // last tail written to DOORBELL
	head     uint32 // last RING_HEAD read

	fence     uint64 // last fence value issued
	fenceSlot uint64 // graphics address of the default WRITE_MEM slot

	stagingGPA uint64
	staging    []byte

	err error  // sticky submission error, returned by the next Wait
	buf []byte // encoding scratch
}

// Open brings up the device behind bus: it checks identity, version and
// capabilities, resets it, maps graphics memory through a seeded GTT
// permutation, places and enables the ring and unmasks interrupts.
func Open(bus Bus, opts Options) (*Driver, error) {
	opts, err := opts.withDefaults()
	if err != nil {
		return nil, err
	}
	d := &Driver{bus: bus, opts: opts, ringSize: opts.RingSize}
	if err := d.identify(); err != nil {
		return nil, err
	}
	if err := bus.WriteReg32(abi.RegControl, abi.ControlReset); err != nil {
		return nil, fmt.Errorf("guest: resetting the device: %w", err)
	}
	if err := d.mapGTT(); err != nil {
		return nil, err
	}
	d.initLocal()
	if err := d.startRing(); err != nil {
		return nil, err
	}
	if err := bus.WriteReg32(abi.RegIntMask, abi.IntFence|abi.IntError); err != nil {
		return nil, fmt.Errorf("guest: unmasking interrupts: %w", err)
	}
	if err := d.allocStaging(); err != nil {
		return nil, err
	}
	return d, nil
}

func (d *Driver) identify() error {
	id, err := d.bus.ReadReg32(abi.RegID)
	if err != nil {
		return fmt.Errorf("guest: reading ID: %w", err)
	}
	if id != abi.IDMagic {
		return fmt.Errorf("guest: device ID %#x, want %#x", id, abi.IDMagic)
	}
	ver, err := d.bus.ReadReg32(abi.RegVersion)
	if err != nil {
		return fmt.Errorf("guest: reading VERSION: %w", err)
	}
	if ver>>16 != abi.VersionMajor {
		return fmt.Errorf("guest: device ABI version %d.%d, driver speaks %d.x", ver>>16, ver&0xffff, abi.VersionMajor)
	}
	if d.caps, err = d.bus.ReadReg32(abi.RegCaps); err != nil {
		return fmt.Errorf("guest: reading CAPS: %w", err)
	}
	if d.memSize, err = d.bus.ReadReg64(abi.RegMemSize); err != nil {
		return fmt.Errorf("guest: reading MEM_SIZE: %w", err)
	}
	if d.memSize < abi.PageSize || d.memSize&(d.memSize-1) != 0 {
		return fmt.Errorf("guest: MEM_SIZE %#x is not a power of two", d.memSize)
	}
	if d.gttEntries, err = d.bus.ReadReg32(abi.RegGTTEntries); err != nil {
		return fmt.Errorf("guest: reading GTT_ENTRIES: %w", err)
	}
	if d.gttEntries == 0 || d.gttEntries > abi.GTTMaxEntries {
		return fmt.Errorf("guest: GTT_ENTRIES %d out of range", d.gttEntries)
	}
	off, err := d.bus.ReadReg32(abi.RegGTTOffset)
	if err != nil {
		return fmt.Errorf("guest: reading GTT_OFFSET: %w", err)
	}
	if off != abi.GTTOffset {
		return fmt.Errorf("guest: GTT_OFFSET %#x, want %#x", off, abi.GTTOffset)
	}
	if n := uint64(len(d.bus.Aperture())); n < d.memSize {
		return fmt.Errorf("guest: aperture is %#x bytes, MEM_SIZE %#x", n, d.memSize)
	}
	return d.identifyLocal()
}

func (d *Driver) startRing() error {
	base, err := d.alloc.alloc(uint64(d.ringSize))
	if err != nil {
		return fmt.Errorf("guest: placing the ring: %w", err)
	}
	d.ringBase = base
	if d.fenceSlot, err = d.alloc.alloc(abi.PageSize); err != nil {
		return fmt.Errorf("guest: placing the fence slot: %w", err)
	}
	return d.enableRing()
}

// enableRing programs the ring placed at d.ringBase and enables it.
func (d *Driver) enableRing() error {
	if err := d.bus.WriteReg64(abi.RegRingBase, d.ringBase); err != nil {
		return fmt.Errorf("guest: writing RING_BASE: %w", err)
	}
	if err := d.bus.WriteReg32(abi.RegRingSize, d.ringSize); err != nil {
		return fmt.Errorf("guest: writing RING_SIZE: %w", err)
	}
	if err := d.bus.WriteReg32(abi.RegControl, abi.ControlEnable); err != nil {
		return fmt.Errorf("guest: enabling the ring: %w", err)
	}
	st, err := d.bus.ReadReg32(abi.RegStatus)
	if err != nil {
		return fmt.Errorf("guest: reading STATUS: %w", err)
	}
	if st&abi.StatusEnabled == 0 {
		if err := d.CheckErrors(); err != nil {
			return fmt.Errorf("guest: ring not enabled: %w", err)
		}
		return errors.New("guest: ring not enabled")
	}
	return d.CheckErrors()
}

func (d *Driver) allocStaging() error {
	d.staging, d.stagingGPA = nil, 0
	dma := d.bus.DMA()
	if dma == nil {
		return nil
	}
	gpa, buf, err := dma.Alloc(d.opts.StagingSize)
	if err != nil {
		return fmt.Errorf("guest: allocating the DMA staging buffer: %w", err)
	}
	d.stagingGPA, d.staging = gpa, buf
	return nil
}

// Rebind moves the driver onto a new bus to the same device — after the
// client (QEMU) reconnected, or after a migration — keeping its mappings,
// allocations, ring position and fence count. Commands may be in flight:
// the device carries on with what was flushed, and commands written to the
// ring but not yet flushed are in graphics memory and are flushed as usual.
// The DMA staging buffer is allocated again from the new bus, which must
// hand out the same guest-physical addresses over the same guest RAM (as a
// migrated VM's RAM is).
func (d *Driver) Rebind(bus Bus) error {
	d.bus, d.err = bus, nil
	base, err := bus.ReadReg64(abi.RegRingBase)
	if err != nil {
		return fmt.Errorf("guest: rebinding: reading RING_BASE: %w", err)
	}
	tail, err := bus.ReadReg32(abi.RegRingTail)
	if err != nil {
		return fmt.Errorf("guest: rebinding: reading RING_TAIL: %w", err)
	}
	if base != d.ringBase || tail != d.flushed {
		return fmt.Errorf("guest: rebinding: device ring at %#x tail %#x, driver left it at %#x tail %#x",
			base, tail, d.ringBase, d.flushed)
	}
	if d.head, err = bus.ReadReg32(abi.RegRingHead); err != nil {
		return fmt.Errorf("guest: rebinding: reading RING_HEAD: %w", err)
	}
	return d.allocStaging()
}

// Reset resets the device (CONTROL.RESET, docs/device-abi.md §3) and
// brings it up again as Open does, keeping the driver's GTT permutation,
// allocations, ring placement and DMA staging buffer: graphics memory is
// not cleared by a reset, so what the guest stored there is still at the
// same graphics addresses afterwards. Commands submitted and not retired
// before the reset are lost; the fence count starts again at 0.
func (d *Driver) Reset() error {
	if err := d.bus.WriteReg32(abi.RegControl, abi.ControlReset); err != nil {
		return fmt.Errorf("guest: resetting the device: %w", err)
	}
	d.err, d.tail, d.flushed, d.head, d.fence = nil, 0, 0, 0, 0
	if err := d.writeGTT(d.perm); err != nil {
		return err
	}
	if err := d.remapLocal(); err != nil {
		return err
	}
	if err := d.enableRing(); err != nil {
		return err
	}
	if err := d.bus.WriteReg32(abi.RegIntMask, abi.IntFence|abi.IntError); err != nil {
		return fmt.Errorf("guest: unmasking interrupts: %w", err)
	}
	return nil
}

// CheckErrors reads ERR_STATUS; when it is nonzero it clears it (and the
// ERROR interrupt cause) and returns a *DeviceError describing it.
func (d *Driver) CheckErrors() error {
	st, err := d.bus.ReadReg32(abi.RegErrStatus)
	if err != nil {
		return fmt.Errorf("guest: reading ERR_STATUS: %w", err)
	}
	if st == 0 {
		return nil
	}
	de := &DeviceError{Status: st}
	for _, r := range []struct {
		off uint32
		v   *uint32
	}{
		{abi.RegErrRingOffset, &de.RingOffset},
		{abi.RegErrOpcode, &de.Opcode},
		{abi.RegErrGTTIndex, &de.GTTIndex},
	} {
		if *r.v, err = d.bus.ReadReg32(r.off); err != nil {
			return fmt.Errorf("guest: reading error registers: %w", err)
		}
	}
	if err := d.bus.WriteReg32(abi.RegErrStatus, st); err != nil {
		return fmt.Errorf("guest: clearing ERR_STATUS: %w", err)
	}
	if err := d.bus.WriteReg32(abi.RegIntStatus, abi.IntError); err != nil {
		return fmt.Errorf("guest: clearing INT_STATUS: %w", err)
	}
	return de
}

// Heartbeat writes v to the HEARTBEAT register.
func (d *Driver) Heartbeat(v uint64) error { return d.bus.WriteReg64(abi.RegHeartbeat, v) }

// Bus is the bus the driver currently uses.
func (d *Driver) Bus() Bus { return d.bus }

// Caps is the device's CAPS register.
func (d *Driver) Caps() uint32 { return d.caps }

// MemSize is the device's graphics memory (= aperture) size in bytes.
func (d *Driver) MemSize() uint64 { return d.memSize }

// GTTEntries is the number of GTT entries the device has.
func (d *Driver) GTTEntries() uint32 { return d.gttEntries }

// MappedSize is the size of the graphics address range [0, MappedSize)
// that the driver mapped; addresses above it are unmapped.
func (d *Driver) MappedSize() uint64 { return uint64(len(d.perm)) << abi.PageShift }

// Ring returns the ring's graphics address and size.
func (d *Driver) Ring() (base uint64, size uint32) { return d.ringBase, d.ringSize }

// FenceSlot is the graphics address of the driver's default WRITE_MEM
// fence slot (8 bytes).
func (d *Driver) FenceSlot() uint64 { return d.fenceSlot }

// LastFence is the value of the last fence issued.
func (d *Driver) LastFence() uint64 { return d.fence }

// Staging returns the DMA staging buffer and its guest-physical address;
// nil when the bus has no DMA memory.
func (d *Driver) Staging() (gpa uint64, buf []byte) { return d.stagingGPA, d.staging }

// Options returns the options the driver runs with, defaults filled in.
func (d *Driver) Options() Options { return d.opts }
