package cuda

import "fmt"

// Virtual memory management (cuda.h, "Virtual Memory Management"): a range
// of device virtual addresses is reserved, physical allocations are created
// and mapped into it, and access is granted. The same physical allocations
// can be unmapped and mapped at another reserved range without copying a
// byte, and a reservation may ask for a particular address.

// allocProp mirrors CUmemAllocationProp (cuda.h, 32 bytes).
type allocProp struct {
	typ          uint32  // CUmemAllocationType: allocTypePinned
	_            uint32  // requestedHandleTypes (CUmemAllocationHandleType): 0, no exportable handle
	locationType uint32  // CUmemLocation.type: locationDevice
	locationID   int32   // CUmemLocation.id: the device ordinal
	win32Meta    uint64  // void *win32HandleMetaData
	_            [8]byte // allocFlags: none
}

// accessDesc mirrors CUmemAccessDesc (cuda.h, 12 bytes).
type accessDesc struct {
	locationType uint32
	locationID   int32
	flags        uint32 // CUmemAccess_flags
}

// Values of the enums above (cuda.h).
const (
	allocTypePinned       = 1 // CU_MEM_ALLOCATION_TYPE_PINNED
	locationDevice        = 1 // CU_MEM_LOCATION_TYPE_DEVICE
	accessReadWrite       = 3 // CU_MEM_ACCESS_FLAGS_PROT_READWRITE
	granularityMinimum    = 0 // CU_MEM_ALLOC_GRANULARITY_MINIMUM
	granularityRecommends = 1 // CU_MEM_ALLOC_GRANULARITY_RECOMMENDED
)

func (dv *Device) prop() *allocProp {
	return &allocProp{typ: allocTypePinned, locationType: locationDevice, locationID: dv.dev}
}

// Granularity is the size and alignment unit of physical allocations and
// mappings on this device (the driver's minimum; 2 MiB on current GPUs).
func (dv *Device) Granularity() (uint64, error) {
	var g uintptr
	p := dv.prop()
	err := dv.do("cuMemGetAllocationGranularity", func() Result {
		return dv.d.fn.cuMemGetAllocationGranularity(&g, p, granularityMinimum)
	})
	return uint64(g), err
}

// Reserve reserves size bytes of device virtual addresses aligned to align,
// asking for addr (0: anywhere). The driver may return another address
// than the one asked for; the caller compares.
func (dv *Device) Reserve(size, align uint64, addr DevPtr) (DevPtr, error) {
	var p DevPtr
	err := dv.do("cuMemAddressReserve", func() Result {
		return dv.d.fn.cuMemAddressReserve(&p, uintptr(size), uintptr(align), addr, 0)
	})
	return p, err
}

// FreeAddress releases a reservation (nothing may be mapped in it).
func (dv *Device) FreeAddress(p DevPtr, size uint64) error {
	return dv.do("cuMemAddressFree", func() Result { return dv.d.fn.cuMemAddressFree(p, uintptr(size)) })
}

// Create allocates size bytes (a multiple of Granularity) of physical
// device memory, not yet mapped anywhere.
func (dv *Device) Create(size uint64) (MemHandle, error) {
	var h MemHandle
	p := dv.prop()
	err := dv.do("cuMemCreate", func() Result { return dv.d.fn.cuMemCreate(&h, uintptr(size), p, 0) })
	return h, err
}

// Release frees a physical allocation once it is no longer mapped.
func (dv *Device) Release(h MemHandle) error {
	return dv.do("cuMemRelease", func() Result { return dv.d.fn.cuMemRelease(h) })
}

// Map maps size bytes of h, from offset, at p (inside a reservation).
func (dv *Device) Map(p DevPtr, size, offset uint64, h MemHandle) error {
	return dv.do("cuMemMap", func() Result { return dv.d.fn.cuMemMap(p, uintptr(size), uintptr(offset), h, 0) })
}

// Unmap unmaps [p, p+size).
func (dv *Device) Unmap(p DevPtr, size uint64) error {
	return dv.do("cuMemUnmap", func() Result { return dv.d.fn.cuMemUnmap(p, uintptr(size)) })
}

// SetAccess makes [p, p+size) readable and writable by this device.
func (dv *Device) SetAccess(p DevPtr, size uint64) error {
	d := &accessDesc{locationType: locationDevice, locationID: dv.dev, flags: accessReadWrite}
	return dv.do("cuMemSetAccess", func() Result { return dv.d.fn.cuMemSetAccess(p, uintptr(size), d, 1) })
}

// Mapping is device memory laid out with the virtual-memory API: a
// reservation at Base with physical chunks mapped into it, readable and
// writable by the device.
type Mapping struct {
	dv   *Device
	Base DevPtr
	Size uint64 // bytes mapped, a multiple of the granularity
	// Reserved is the address range's length (≥ Size; NewMappingIn).
	Reserved uint64
	align    uint64
	chunks   []chunk
}

type chunk struct {
	h        MemHandle
	off, len uint64
}

// MaxChunk bounds one physical allocation of a Mapping, so that a large
// mapping does not need one contiguous piece of device memory.
const MaxChunk = 1 << 30

// NewMapping reserves size bytes (rounded up to the granularity) at addr
// if the driver agrees (0: anywhere), creates physical memory in chunks of
// at most MaxChunk and maps it there.
func (dv *Device) NewMapping(size uint64, addr DevPtr) (*Mapping, error) {
	return dv.NewMappingIn(size, 0, addr)
}

// NewMappingIn is NewMapping with an address range of reserve bytes (when
// larger than size) of which the first size are mapped. Measured on the
// H100 (driver 580): the driver grants an address asked of
// cuMemAddressReserve for a 1 GiB range where it ignores the same address
// asked for a 2 MiB one in the same process (it then sub-allocates in its
// own arena), so a mapping that must be placed at a chosen address
// reserves at least that much.
func (dv *Device) NewMappingIn(size, reserve uint64, addr DevPtr) (*Mapping, error) {
	g, err := dv.Granularity()
	if err != nil {
		return nil, err
	}
	if g == 0 {
		return nil, fmt.Errorf("cuda: allocation granularity 0")
	}
	size = (size + g - 1) / g * g
	reserve = max(size, (reserve+g-1)/g*g)
	m := &Mapping{dv: dv, Size: size, Reserved: reserve, align: g}
	if m.Base, err = dv.Reserve(reserve, g, addr); err != nil {
		return nil, err
	}
	for off := uint64(0); off < size; {
		n := min(size-off, MaxChunk/g*g)
		h, err := dv.Create(n)
		if err == nil {
			if err = dv.Map(m.Base+DevPtr(off), n, 0, h); err != nil {
				_ = dv.Release(h)
			}
		}
		if err != nil {
			m.Close()
			return nil, fmt.Errorf("cuda: mapping %d bytes at offset %#x of %#x: %w", n, off, m.Base, err)
		}
		m.chunks = append(m.chunks, chunk{h: h, off: off, len: n})
		off += n
	}
	if err := dv.SetAccess(m.Base, size); err != nil {
		m.Close()
		return nil, err
	}
	return m, nil
}

// Move maps the same physical memory at addr instead, without copying,
// if the driver reserves exactly addr; otherwise the mapping stays where it
// is. It reports whether it moved.
func (m *Mapping) Move(addr DevPtr) (bool, error) {
	if addr == m.Base {
		return true, nil
	}
	dv := m.dv
	p, err := dv.Reserve(m.Reserved, m.align, addr)
	if err != nil {
		return false, nil // the range is taken: stay
	}
	if p != addr {
		return false, dv.FreeAddress(p, m.Reserved)
	}
	for i, c := range m.chunks {
		if err := dv.Map(p+DevPtr(c.off), c.len, 0, c.h); err != nil {
			for _, d := range m.chunks[:i] {
				_ = dv.Unmap(p+DevPtr(d.off), d.len)
			}
			_ = dv.FreeAddress(p, m.Reserved)
			return false, err
		}
	}
	if err := dv.SetAccess(p, m.Size); err != nil {
		for _, c := range m.chunks {
			_ = dv.Unmap(p+DevPtr(c.off), c.len)
		}
		_ = dv.FreeAddress(p, m.Reserved)
		return false, err
	}
	for _, c := range m.chunks {
		_ = dv.Unmap(m.Base+DevPtr(c.off), c.len)
	}
	_ = dv.FreeAddress(m.Base, m.Reserved)
	m.Base = p
	return true, nil
}

// Close unmaps and frees everything; the first error is returned.
func (m *Mapping) Close() error {
	var first error
	keep := func(err error) {
		if first == nil {
			first = err
		}
	}
	for _, c := range m.chunks {
		if err := m.dv.Unmap(m.Base+DevPtr(c.off), c.len); err != nil {
			keep(err)
		}
		if err := m.dv.Release(c.h); err != nil {
			keep(err)
		}
	}
	m.chunks = nil
	if m.Base != 0 {
		if err := m.dv.FreeAddress(m.Base, m.Reserved); err != nil {
			keep(err)
		}
		m.Base = 0
	}
	return first
}

// Addr is the mapping's device address (Base).
func (m *Mapping) Addr() DevPtr { return m.Base }
