package pool

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
)

// PageSize is the allocation granule: partition offsets and sizes are
// multiples of it (the graphics page size of docs/device-abi.md §1).
const PageSize = 4096

// Errors callers branch on.
var (
	ErrNoSpace  = errors.New("pool: no free range large enough")
	ErrInUse    = errors.New("pool: range overlaps an allocated partition")
	ErrRange    = errors.New("pool: range outside the pool")
	ErrSize     = errors.New("pool: size must be a nonzero multiple of the page size")
	ErrAlign    = errors.New("pool: offset not page aligned")
	ErrNotFound = errors.New("pool: no such partition")
	ErrClosed   = errors.New("pool: closed")
)

// Partition is a page-aligned byte range of the pool that backs one vGPU's
// graphics memory.
type Partition struct {
	Offset uint64 // byte offset in the pool
	Size   uint64 // bytes
}

// Pages is the number of pages in the partition.
func (pt Partition) Pages() uint64 { return pt.Size / PageSize }

// End is the first byte past the partition.
func (pt Partition) End() uint64 { return pt.Offset + pt.Size }

func (pt Partition) String() string {
	return fmt.Sprintf("[%#x, %#x)", pt.Offset, pt.End())
}

// Pool is a memfd-backed region carved into partitions.
type Pool struct {
	size uint64
	file *os.File
	mem  []byte

	mu     sync.Mutex
	parts  []Partition // allocated, sorted by Offset, non-overlapping
	closed bool
}

// New creates a pool of size bytes (nonzero, a multiple of PageSize), backed
// by a fresh memfd mapped shared and read-write. The pool starts all zeros.
func New(size uint64) (*Pool, error) {
	if size == 0 || size%PageSize != 0 {
		return nil, fmt.Errorf("%w: %d", ErrSize, size)
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("%w: %d bytes cannot be mapped", ErrRange, size)
	}
	f, mem, err := createMapped(size)
	if err != nil {
		return nil, err
	}
	return &Pool{size: size, file: f, mem: mem}, nil
}

// Size is the pool's size in bytes.
func (p *Pool) Size() uint64 { return p.size }

// File is the pool's memfd, for passing to QEMU, which mmaps a partition of
// it as a vGPU's aperture. The pool owns it: callers must not close it.
func (p *Pool) File() *os.File { return p.file }

// Mem is the whole pool mapping, or nil once the pool is closed.
func (p *Pool) Mem() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	return p.mem
}

// Slice is the part of the mapping that backs pt, or nil once the pool is
// closed or if pt lies outside the pool.
func (p *Pool) Slice(pt Partition) []byte {
	mem := p.Mem()
	if mem == nil || pt.Offset > p.size || pt.Size > p.size-pt.Offset {
		return nil
	}
	return mem[pt.Offset:pt.End():pt.End()]
}

// Alloc reserves the lowest free range of size bytes (nonzero, a multiple of
// PageSize). It fails with ErrNoSpace when no free range is large enough.
func (p *Pool) Alloc(size uint64) (Partition, error) {
	if size == 0 || size%PageSize != 0 {
		return Partition{}, fmt.Errorf("%w: %d", ErrSize, size)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return Partition{}, ErrClosed
	}
	var start uint64 // first byte of the current gap
	for i, pt := range p.parts {
		if pt.Offset-start >= size {
			return p.insertLocked(i, Partition{Offset: start, Size: size}), nil
		}
		start = pt.End()
	}
	if p.size-start >= size {
		return p.insertLocked(len(p.parts), Partition{Offset: start, Size: size}), nil
	}
	return Partition{}, fmt.Errorf("%w: %d bytes wanted, pool of %d bytes", ErrNoSpace, size, p.size)
}

// AllocAt reserves exactly [offset, offset+size). It fails with ErrRange when
// the range leaves the pool and ErrInUse when it overlaps a partition.
func (p *Pool) AllocAt(offset, size uint64) (Partition, error) {
	if size == 0 || size%PageSize != 0 {
		return Partition{}, fmt.Errorf("%w: %d", ErrSize, size)
	}
	if offset%PageSize != 0 {
		return Partition{}, fmt.Errorf("%w: %#x", ErrAlign, offset)
	}
	want := Partition{Offset: offset, Size: size}
	if offset > p.size || size > p.size-offset {
		return Partition{}, fmt.Errorf("%w: %v in a pool of %#x bytes", ErrRange, want, p.size)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return Partition{}, ErrClosed
	}
	// i is the first partition that ends after offset; it and its
	// predecessor bound the gap offset falls in.
	i, _ := slices.BinarySearchFunc(p.parts, offset, func(pt Partition, off uint64) int {
		if pt.End() <= off {
			return -1
		}
		return 1
	})
	if i < len(p.parts) && p.parts[i].Offset < want.End() {
		return Partition{}, fmt.Errorf("%w: %v overlaps %v", ErrInUse, want, p.parts[i])
	}
	return p.insertLocked(i, want), nil
}

// insertLocked inserts pt at index i of the sorted partition list.
func (p *Pool) insertLocked(i int, pt Partition) Partition {
	p.parts = slices.Insert(p.parts, i, pt)
	return pt
}

// Free returns part to the pool and zeroes it, so its next tenant reads
// zeros. part must be exactly a partition that Alloc or AllocAt returned and
// that has not been freed; anything else fails with ErrNotFound.
func (p *Pool) Free(part Partition) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	i, found := slices.BinarySearchFunc(p.parts, part.Offset, func(pt Partition, off uint64) int {
		switch {
		case pt.Offset < off:
			return -1
		case pt.Offset > off:
			return 1
		}
		return 0
	})
	if !found || p.parts[i] != part {
		return fmt.Errorf("%w: %v", ErrNotFound, part)
	}
	// Zero before the range becomes allocatable again. The lock is held
	// throughout, so no Alloc can hand the range out half cleared.
	p.zeroLocked(part)
	p.parts = slices.Delete(p.parts, i, i+1)
	return nil
}

// zeroLocked clears part: hole punching gives the pages back to the host
// and makes them read as zeros; if the kernel refuses, clear them by hand.
func (p *Pool) zeroLocked(part Partition) {
	if punchHole(p.file, part.Offset, part.Size) == nil {
		return
	}
	clear(p.mem[part.Offset:part.End()])
}

// Partitions lists the allocated partitions by offset.
func (p *Pool) Partitions() []Partition {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.parts)
}

// Close unmaps the pool and closes the memfd. Slices obtained from Mem or
// Slice must no longer be used. Closing twice fails with ErrClosed.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	p.closed = true
	p.parts = nil
	err := unmap(p.mem)
	p.mem = nil
	if cerr := p.file.Close(); cerr != nil && err == nil {
		err = fmt.Errorf("pool: closing memfd: %w", cerr)
	}
	return err
}
