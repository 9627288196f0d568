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
// graphics memory. It names the range only; the pool keeps the memfd behind
// it (File).
type Partition struct {
	Offset uint64 // byte offset in the pool
	Size   uint64 // bytes of graphics memory (the aperture's, in the memfd)
	// Local is the bytes of device-local memory (docs/device-abi.md
	// §1.3) right after the graphics memory, at Offset+Size: gmigd's
	// own anonymous memory, in no file, never handed to a client.
	Local uint64
}

// Pages is the number of graphics-memory pages in the partition.
func (pt Partition) Pages() uint64 { return pt.Size / PageSize }

// LocalPages is the number of device-local pages in the partition.
func (pt Partition) LocalPages() uint64 { return pt.Local / PageSize }

// End is the first byte past the partition (past its local memory).
func (pt Partition) End() uint64 { return pt.Offset + pt.Size + pt.Local }

// ApertureEnd is the first byte past its graphics memory: where its local
// memory starts.
func (pt Partition) ApertureEnd() uint64 { return pt.Offset + pt.Size }

func (pt Partition) String() string {
	return fmt.Sprintf("[%#x, %#x)", pt.Offset, pt.End())
}

// Pool is a reserved address range carved into partitions, each backed by
// its own memfd.
type Pool struct {
	size uint64
	mem  []byte // the reserved range; only allocated partitions are mapped

	mu     sync.Mutex
	parts  []allocation // allocated, sorted by Offset, non-overlapping
	closed bool
}

// allocation is an allocated partition and the memfd that backs it.
type allocation struct {
	Partition
	file *os.File // sealed, exactly Size bytes, mapped at mem[Offset:]
}

// New creates a pool of size bytes (nonzero, a multiple of PageSize): a
// reserved address range with no memory behind it until partitions are
// allocated.
func New(size uint64) (*Pool, error) {
	if size == 0 || size%PageSize != 0 {
		return nil, fmt.Errorf("%w: %d", ErrSize, size)
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("%w: %d bytes cannot be mapped", ErrRange, size)
	}
	mem, err := reserve(size)
	if err != nil {
		return nil, err
	}
	return &Pool{size: size, mem: mem}, nil
}

// Size is the pool's size in bytes.
func (p *Pool) Size() uint64 { return p.size }

// Mem is the whole pool range, or nil once the pool is closed. Pool offsets
// index it. Only allocated partitions are mapped: touching any other byte
// faults.
func (p *Pool) Mem() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	return p.mem
}

// Slice is the part of the pool range that backs pt's graphics memory, or
// nil once the pool is closed or if pt is not an allocated partition.
func (p *Pool) Slice(pt Partition) []byte {
	return p.slice(pt, pt.Offset, pt.ApertureEnd())
}

// LocalSlice is the part of the pool range that backs pt's device-local
// memory (empty when it has none), or nil as Slice.
func (p *Pool) LocalSlice(pt Partition) []byte {
	return p.slice(pt, pt.ApertureEnd(), pt.End())
}

func (p *Pool) slice(pt Partition, lo, hi uint64) []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	if _, ok := p.findLocked(pt); !ok {
		return nil
	}
	return p.mem[lo:hi:hi]
}

// File is pt's memfd, the one descriptor to hand to pt's client (QEMU
// mmaps it at offset 0 as the vGPU's aperture). It holds pt's graphics
// memory and nothing else (never its local memory, which is in no file):
// its size is exactly pt.Size and sealed (no shrinking, no
// growing, no further seals). The pool owns it and closes it when pt is
// freed; callers must not close it. A partition that is not allocated
// fails with ErrNotFound.
func (p *Pool) File(pt Partition) (*os.File, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil, ErrClosed
	}
	i, ok := p.findLocked(pt)
	if !ok {
		return nil, fmt.Errorf("%w: %v", ErrNotFound, pt)
	}
	return p.parts[i].file, nil
}

// Alloc reserves the lowest free range of size bytes (nonzero, a multiple of
// PageSize) and backs it with a fresh memfd, which reads as zeros. It fails
// with ErrNoSpace when no free range is large enough.
func (p *Pool) Alloc(size uint64) (Partition, error) { return p.AllocLocal(size, 0) }

// AllocLocal is Alloc for a partition that also has local bytes (a
// multiple of PageSize, possibly 0) of device-local memory right after
// its size bytes of graphics memory: private anonymous memory of gmigd's,
// zeros at first, in no file, so no client is ever handed it.
func (p *Pool) AllocLocal(size, local uint64) (Partition, error) {
	if size == 0 || size%PageSize != 0 {
		return Partition{}, fmt.Errorf("%w: %d", ErrSize, size)
	}
	if local%PageSize != 0 || size+local < size {
		return Partition{}, fmt.Errorf("%w: %d local bytes", ErrSize, local)
	}
	total := size + local
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return Partition{}, ErrClosed
	}
	var start uint64 // first byte of the current gap
	for i, a := range p.parts {
		if a.Offset-start >= total {
			return p.insertLocked(i, Partition{Offset: start, Size: size, Local: local})
		}
		start = a.End()
	}
	if p.size-start >= total {
		return p.insertLocked(len(p.parts), Partition{Offset: start, Size: size, Local: local})
	}
	return Partition{}, fmt.Errorf("%w: %d bytes wanted, pool of %d bytes", ErrNoSpace, total, p.size)
}

// AllocAt reserves exactly [offset, offset+size) and backs it with a fresh
// memfd. It fails with ErrRange when the range leaves the pool and ErrInUse
// when it overlaps a partition.
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
	i, _ := slices.BinarySearchFunc(p.parts, offset, func(a allocation, off uint64) int {
		if a.End() <= off {
			return -1
		}
		return 1
	})
	if i < len(p.parts) && p.parts[i].Offset < want.End() {
		return Partition{}, fmt.Errorf("%w: %v overlaps %v", ErrInUse, want, p.parts[i].Partition)
	}
	return p.insertLocked(i, want)
}

// insertLocked backs pt with a new memfd mapped at its offset and inserts
// it at index i of the sorted partition list. The memfd is new whatever
// was at that offset before: a client still mapping an earlier tenant's
// memfd keeps that one, never this.
func (p *Pool) insertLocked(i int, pt Partition) (Partition, error) {
	f, err := newPartitionFile(pt.Size)
	if err != nil {
		return Partition{}, err
	}
	if err := mapPartition(p.mem, pt.Offset, pt.Size, f); err != nil {
		f.Close()
		return Partition{}, err
	}
	if pt.Local > 0 {
		if err := mapLocal(p.mem, pt.ApertureEnd(), pt.Local); err != nil {
			_ = unmapPartition(p.mem, pt.Offset, pt.Size)
			f.Close()
			return Partition{}, err
		}
	}
	p.parts = slices.Insert(p.parts, i, allocation{Partition: pt, file: f})
	return pt, nil
}

// findLocked returns the index of the allocation that is exactly pt.
func (p *Pool) findLocked(pt Partition) (int, bool) {
	i, found := slices.BinarySearchFunc(p.parts, pt.Offset, func(a allocation, off uint64) int {
		switch {
		case a.Offset < off:
			return -1
		case a.Offset > off:
			return 1
		}
		return 0
	})
	return i, found && p.parts[i].Partition == pt
}

// Free returns part to the pool: its range goes back to reserved address
// space (touching it faults) and the pool closes its memfd. A client that
// still maps that memfd keeps its pages, which no later partition ever
// uses. part must be exactly a partition that Alloc or AllocAt returned and
// that has not been freed; anything else fails with ErrNotFound. If the
// range cannot be unmapped the partition stays allocated (nothing else can
// be placed there) and Free fails.
func (p *Pool) Free(part Partition) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	i, ok := p.findLocked(part)
	if !ok {
		return fmt.Errorf("%w: %v", ErrNotFound, part)
	}
	if err := unmapPartition(p.mem, part.Offset, part.Size+part.Local); err != nil {
		return err
	}
	err := p.parts[i].file.Close()
	p.parts = slices.Delete(p.parts, i, i+1)
	if err != nil {
		return fmt.Errorf("pool: closing the memfd of %v: %w", part, err)
	}
	return nil
}

// DiscardLocal gives the host memory behind bytes [off, off+n) of pt's
// device-local memory back to the kernel: those bytes read as zeros
// afterwards and hold no memory until they are written again. It is for
// local memory whose content lives elsewhere (a cuda vGPU's, on the GPU,
// where the range is only a migration's receive buffer); on the software
// back end it would erase the vGPU's memory. off and n must be multiples
// of PageSize (ErrAlign, ErrSize; n may be 0) and the range inside pt's
// local memory (ErrRange); pt must be allocated (ErrNotFound).
func (p *Pool) DiscardLocal(pt Partition, off, n uint64) error {
	return p.adviseLocal(pt, off, n, discardLocal)
}

// FreeLocal lets the kernel take the host memory behind bytes [off, off+n)
// of pt's device-local memory whenever it needs memory (madvise
// MADV_FREE), as DiscardLocal gives it at once: until the kernel takes a
// page it stays mapped and keeps its bytes, and a write to it then costs
// no page fault and keeps it; a page the kernel took reads as zeros and
// is faulted in again when written. For a migration's receive buffer
// whose pages may arrive again (a destination's pre-copy): a page sent
// again in the stop phase lands in memory already there, with no fault
// and no zeroing of a fresh page in the downtime. The arguments and
// errors are DiscardLocal's.
func (p *Pool) FreeLocal(pt Partition, off, n uint64) error {
	return p.adviseLocal(pt, off, n, freeLocal)
}

// adviseLocal checks DiscardLocal's and FreeLocal's arguments and calls
// advise over the range of the pool's memory.
func (p *Pool) adviseLocal(pt Partition, off, n uint64, advise func(mem []byte, off, size uint64) error) error {
	if off%PageSize != 0 {
		return fmt.Errorf("%w: local offset %#x", ErrAlign, off)
	}
	if n%PageSize != 0 {
		return fmt.Errorf("%w: %d local bytes to discard", ErrSize, n)
	}
	if off > pt.Local || n > pt.Local-off {
		return fmt.Errorf("%w: local bytes [%#x, %#x) of %v, which has %#x", ErrRange, off, off+n, pt, pt.Local)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	if _, ok := p.findLocked(pt); !ok {
		return fmt.Errorf("%w: %v", ErrNotFound, pt)
	}
	if n == 0 {
		return nil
	}
	return advise(p.mem, pt.ApertureEnd()+off, n)
}

// Partitions lists the allocated partitions by offset.
func (p *Pool) Partitions() []Partition {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]Partition, len(p.parts))
	for i, a := range p.parts {
		out[i] = a.Partition
	}
	return out
}

// Close unmaps the pool and closes every partition's memfd. Slices obtained
// from Mem or Slice must no longer be used. Closing twice fails with
// ErrClosed.
func (p *Pool) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return ErrClosed
	}
	p.closed = true
	errs := []error{release(p.mem)}
	p.mem = nil
	for _, a := range p.parts {
		if err := a.file.Close(); err != nil {
			errs = append(errs, fmt.Errorf("pool: closing the memfd of %v: %w", a.Partition, err))
		}
	}
	p.parts = nil
	return errors.Join(errs...)
}
