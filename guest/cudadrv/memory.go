package cudadrv

import (
	"errors"
	"fmt"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/guest"
)

// Memory is where device memory comes from. An allocation has a device
// pointer (what cuMemAlloc hands the program and kernels dereference) and
// an operand address (what COPY, FILL and DMA commands take: a graphics
// address in the aperture, the device address itself in device-local
// memory, ABI 1.3); the Lib
// translates one into the other by the allocation that holds it, so
// pointer arithmetic inside an allocation works.
type Memory interface {
	// Alloc reserves n bytes and returns their device pointer and
	// graphics address.
	Alloc(n uint64) (ptr, ga uint64, err error)
	// Free releases the allocation Alloc made at graphics address ga.
	Free(ga uint64) error
	// FreeBytes and Size are what cuMemGetInfo reports.
	FreeBytes() uint64
	Size() uint64
	// CPU says the CPU reaches the memory through the aperture (host
	// copies are CPU copies); otherwise only commands reach it and host
	// copies are staged (staging.go).
	CPU() bool
}

// ApertureMemory is device memory in the aperture: allocations from the
// guest driver's allocator over the GTT-mapped graphics range, CPU access
// through the mapped aperture. Device pointers are graphics addresses.
type ApertureMemory struct{ D *guest.Driver }

// Alloc implements Memory.
func (m ApertureMemory) Alloc(n uint64) (uint64, uint64, error) {
	ga, err := m.D.Alloc(n)
	return ga, ga, err
}

// Free implements Memory.
func (m ApertureMemory) Free(ga uint64) error { return m.D.Free(ga) }

// FreeBytes implements Memory.
func (m ApertureMemory) FreeBytes() uint64 { return m.D.FreeBytes() }

// Size implements Memory: the graphics memory the driver mapped.
func (m ApertureMemory) Size() uint64 { return m.D.MappedSize() }

// CPU implements Memory.
func (m ApertureMemory) CPU() bool { return true }

// LocalMemory is device-local memory (ABI 1.3, CAPS bit 6): allocations of
// local bytes (guest.Driver.AllocDevice), not mapped in the GTT; device
// pointer = DEVICE_ADDR_BASE + local offset, which is also what commands
// take (docs/device-abi.md §1.4) and the address kernels launched with
// LAUNCH_GRID dereference. So allocations are bounded by LOCAL_MEM_SIZE
// alone, not by the GTT's 65536 entries.
type LocalMemory struct {
	D *guest.Driver
	// Base is DEVICE_ADDR_BASE: the device address of local byte 0.
	Base uint64
}

// Alloc implements Memory: the device address is both the pointer and
// the commands' operand.
func (m LocalMemory) Alloc(n uint64) (uint64, uint64, error) {
	off, err := m.D.AllocDevice(n)
	if err != nil {
		return 0, 0, err
	}
	return m.Base + off, m.Base + off, nil
}

// Free implements Memory.
func (m LocalMemory) Free(addr uint64) error {
	if addr < m.Base {
		return fmt.Errorf("cudadrv: freeing %#x, below DEVICE_ADDR_BASE %#x", addr, m.Base)
	}
	return m.D.FreeDevice(addr - m.Base)
}

// FreeBytes implements Memory: the free local memory.
func (m LocalMemory) FreeBytes() uint64 { return m.D.DeviceFreeBytes() }

// Size implements Memory: LOCAL_MEM_SIZE.
func (m LocalMemory) Size() uint64 { return m.D.LocalMemSize() }

// CPU implements Memory.
func (m LocalMemory) CPU() bool { return false }

// defaultMemory is where allocations come from on d: device-local memory
// at device addresses where CAPS announces them (bit 6), else the aperture.
func defaultMemory(d *guest.Driver) (Memory, error) {
	if !d.DeviceAddrs() {
		return ApertureMemory{D: d}, nil
	}
	base, err := d.Bus().ReadReg64(abi.RegDeviceAddrBase)
	if err != nil {
		return nil, fmt.Errorf("cudadrv: reading DEVICE_ADDR_BASE: %w", err)
	}
	if base == 0 || base%deviceAddrAlign != 0 {
		return nil, fmt.Errorf("cudadrv: DEVICE_ADDR_BASE %#x is not a nonzero multiple of %#x", base, deviceAddrAlign)
	}
	return LocalMemory{D: d, Base: base}, nil
}

// deviceAddrAlign is DEVICE_ADDR_BASE's alignment (docs/device-abi.md
// §1.4, ABI 1.3: 2 MiB).
const deviceAddrAlign = 2 << 20

// MemAlloc is cuMemAlloc_v2.
func (l *Lib) MemAlloc(t Thread, n uint64) (uint64, Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	c, r := l.currentLocked(t)
	if r != Success {
		return 0, r
	}
	if n == 0 {
		return 0, ErrInvalidValue
	}
	ptr, ga, err := l.mem.Alloc(n)
	if errors.Is(err, guest.ErrNoGraphicsMemory) {
		return 0, l.fail(ErrOutOfMemory, fmt.Errorf("cudadrv: allocating %d bytes: %w", n, err))
	}
	if err != nil {
		return 0, l.fail(ErrUnknown, fmt.Errorf("cudadrv: allocating %d bytes: %w", n, err))
	}
	l.allocs[ptr] = alloc{size: n, ga: ga, ctx: c}
	return ptr, Success
}

// MemFree is cuMemFree_v2. Like the driver it waits for queued work first,
// which may still use the memory.
func (l *Lib) MemFree(t Thread, ptr uint64) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, r := l.currentLocked(t); r != Success {
		return r
	}
	a, ok := l.allocs[ptr]
	if !ok {
		return ErrInvalidValue
	}
	if r := l.syncLocked(); r != Success {
		return r
	}
	delete(l.allocs, ptr)
	if err := l.mem.Free(a.ga); err != nil {
		return l.fail(ErrUnknown, fmt.Errorf("cudadrv: freeing %#x: %w", ptr, err))
	}
	return Success
}

// MemGetInfo is cuMemGetInfo_v2.
func (l *Lib) MemGetInfo(t Thread) (free, total uint64, r Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, r := l.currentLocked(t); r != Success {
		return 0, 0, r
	}
	return l.mem.FreeBytes(), l.mem.Size(), Success
}

// MemGetAddressRange is cuMemGetAddressRange_v2: the allocation holding
// ptr.
func (l *Lib) MemGetAddressRange(t Thread, ptr uint64) (base, size uint64, r Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, r := l.currentLocked(t); r != Success {
		return 0, 0, r
	}
	for p, a := range l.allocs {
		if ptr >= p && ptr < p+a.size {
			return p, a.size, Success
		}
	}
	return 0, 0, ErrNotFound
}

// resolveLocked checks that [ptr, ptr+n) lies in one allocation and
// returns the graphics address of ptr.
func (l *Lib) resolveLocked(ptr, n uint64) (uint64, Result) {
	for p, a := range l.allocs {
		if ptr >= p && ptr < p+a.size {
			if n <= p+a.size-ptr {
				return a.ga + (ptr - p), Success
			}
			return 0, ErrInvalidValue
		}
	}
	return 0, ErrInvalidValue
}
