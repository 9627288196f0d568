package cudadrv

import (
	"errors"
	"fmt"

	"github.com/gmig-dev/gmig/guest"
)

// Memory is where device memory comes from. Device pointers are graphics
// addresses: commands reach them through the GTT wherever the pages live.
// Today that is the aperture (ApertureMemory); device-local memory, which
// only commands reach, will be another implementation whose Read and Write
// go by DMA.
type Memory interface {
	// Alloc reserves n bytes and returns their graphics address.
	Alloc(n uint64) (uint64, error)
	// Free releases an allocation Alloc made.
	Free(ga uint64) error
	// FreeBytes and Size are what cuMemGetInfo reports.
	FreeBytes() uint64
	Size() uint64
	// Write and Read move bytes between the host and graphics memory with
	// the CPU; the caller has made sure no queued command touches them
	// (docs/device-abi.md §1.2).
	Write(ga uint64, p []byte) error
	Read(ga uint64, p []byte) error
}

// ApertureMemory is device memory in the aperture: allocations from the
// guest driver's allocator over the GTT-mapped graphics range, CPU access
// through the mapped aperture.
type ApertureMemory struct{ D *guest.Driver }

// Alloc implements Memory.
func (m ApertureMemory) Alloc(n uint64) (uint64, error) { return m.D.Alloc(n) }

// Free implements Memory.
func (m ApertureMemory) Free(ga uint64) error { return m.D.Free(ga) }

// FreeBytes implements Memory.
func (m ApertureMemory) FreeBytes() uint64 { return m.D.FreeBytes() }

// Size implements Memory: the graphics memory the driver mapped.
func (m ApertureMemory) Size() uint64 { return m.D.MappedSize() }

// Write implements Memory.
func (m ApertureMemory) Write(ga uint64, p []byte) error { return m.D.WriteGA(ga, p) }

// Read implements Memory.
func (m ApertureMemory) Read(ga uint64, p []byte) error { return m.D.ReadGA(ga, p) }

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
	ga, err := l.mem.Alloc(n)
	if errors.Is(err, guest.ErrNoGraphicsMemory) {
		return 0, l.fail(ErrOutOfMemory, fmt.Errorf("cudadrv: allocating %d bytes: %w", n, err))
	}
	if err != nil {
		return 0, l.fail(ErrUnknown, fmt.Errorf("cudadrv: allocating %d bytes: %w", n, err))
	}
	l.allocs[ga] = alloc{size: n, ctx: c}
	return ga, Success
}

// MemFree is cuMemFree_v2. Like the driver it waits for queued work first,
// which may still use the memory.
func (l *Lib) MemFree(t Thread, ga uint64) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, r := l.currentLocked(t); r != Success {
		return r
	}
	if _, ok := l.allocs[ga]; !ok {
		return ErrInvalidValue
	}
	if r := l.syncLocked(); r != Success {
		return r
	}
	delete(l.allocs, ga)
	if err := l.mem.Free(ga); err != nil {
		return l.fail(ErrUnknown, fmt.Errorf("cudadrv: freeing %#x: %w", ga, err))
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
// ga.
func (l *Lib) MemGetAddressRange(t Thread, ga uint64) (base, size uint64, r Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, r := l.currentLocked(t); r != Success {
		return 0, 0, r
	}
	for p, a := range l.allocs {
		if ga >= p && ga < p+a.size {
			return p, a.size, Success
		}
	}
	return 0, 0, ErrNotFound
}

// checkRangeLocked: [ga, ga+n) lies in one allocation.
func (l *Lib) checkRangeLocked(ga, n uint64) Result {
	for p, a := range l.allocs {
		if ga >= p && ga < p+a.size {
			if n <= p+a.size-ga {
				return Success
			}
			return ErrInvalidValue
		}
	}
	return ErrInvalidValue
}
