package vfio

import (
	"fmt"
	"math"
	"os"
	"sort"
	"sync"

	"golang.org/x/sys/unix"
)

// DMARegion describes one window of client (guest) memory the server may
// access: VFIO_USER_DMA_MAP's address, size, file offset and protection, with
// the descriptor the client passed.
type DMARegion struct {
	IOVA   uint64
	Size   uint64
	Offset uint64   // offset of IOVA in File
	Prot   uint32   // DMAProtRead | DMAProtWrite
	File   *os.File // nil: no descriptor (QEMU maps ROM/BIOS ranges so)
}

// DMATable is the set of DMA mappings of one client. Map and Unmap come from
// the server goroutine; ReadAt and WriteAt from any goroutine (a device
// engine) at the same time. Copies run under the read lock and munmap under
// the write lock, so no copy ever touches memory being unmapped.
type DMATable struct {
	mu   sync.RWMutex
	maps []*dmaMapping // sorted by iova, never overlapping
}

// dmaMapping is one mapped window. mem is nil for a descriptor-less region.
type dmaMapping struct {
	iova, size, offset uint64
	prot               uint32
	mem                []byte // size bytes at iova
	raw                []byte // what mmap returned, for munmap
}

func (m *dmaMapping) end() uint64 { return m.iova + m.size }

// NewDMATable returns an empty table.
func NewDMATable() *DMATable { return &DMATable{} }

// Map adds r. With File set the window is mmap'd (shared) from File at
// Offset with r.Prot; Map does not keep File, the caller may close it once
// Map returns. Without File the window is recorded but every access to it
// fails with ErrNoFD. Map refuses a zero size, an address range that wraps,
// unknown protection bits (ErrInvalid) and any overlap (ErrOverlap).
func (t *DMATable) Map(r DMARegion) error {
	if r.Size == 0 || r.IOVA+r.Size < r.IOVA || r.Size > math.MaxInt/2 {
		return fmt.Errorf("%w: dma map iova %#x size %#x", ErrInvalid, r.IOVA, r.Size)
	}
	if r.Prot&^(DMAProtRead|DMAProtWrite) != 0 {
		return fmt.Errorf("%w: dma map protection %#x", ErrInvalid, r.Prot)
	}
	m := &dmaMapping{iova: r.IOVA, size: r.Size, offset: r.Offset, prot: r.Prot}
	t.mu.RLock()
	err := t.checkFreeLocked(m)
	t.mu.RUnlock()
	if err != nil {
		return err
	}
	if r.File != nil {
		if err := mmapRegion(m, r.File); err != nil {
			return err
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if err := t.checkFreeLocked(m); err != nil {
		munmapRegion(m)
		return err
	}
	if len(t.maps) >= defaultMaxDMAMaps { // as advertised in max_dma_maps
		munmapRegion(m)
		return fmt.Errorf("vfio: dma map %#x: %d mappings: %w", m.iova, len(t.maps), unix.ENOSPC)
	}
	i := sort.Search(len(t.maps), func(i int) bool { return t.maps[i].iova > m.iova })
	t.maps = append(t.maps, nil)
	copy(t.maps[i+1:], t.maps[i:])
	t.maps[i] = m
	return nil
}

// checkFreeLocked fails with ErrOverlap if m overlaps a mapping.
func (t *DMATable) checkFreeLocked(m *dmaMapping) error {
	i := t.firstEndingAfterLocked(m.iova)
	if i < len(t.maps) && t.maps[i].iova < m.end() {
		o := t.maps[i]
		return fmt.Errorf("%w: [%#x, %#x) against [%#x, %#x)", ErrOverlap, m.iova, m.end(), o.iova, o.end())
	}
	return nil
}

// firstEndingAfterLocked returns the index of the first mapping that ends
// after addr (the only candidate to contain addr).
func (t *DMATable) firstEndingAfterLocked(addr uint64) int {
	return sort.Search(len(t.maps), func(i int) bool { return t.maps[i].end() > addr })
}

// Unmap removes the mappings inside [iova, iova+size). The range must match
// one mapping exactly (as the specification requires) or cover whole
// mappings (as the kernel's type1 IOMMU allows); a mapping that straddles an
// end fails with ErrInvalid and a range holding no mapping with ErrNotMapped.
func (t *DMATable) Unmap(iova, size uint64) error {
	if size == 0 || iova+size < iova {
		return fmt.Errorf("%w: dma unmap iova %#x size %#x", ErrInvalid, iova, size)
	}
	end := iova + size
	t.mu.Lock()
	defer t.mu.Unlock()
	lo := t.firstEndingAfterLocked(iova)
	hi := lo
	for hi < len(t.maps) && t.maps[hi].iova < end {
		m := t.maps[hi]
		if m.iova < iova || m.end() > end {
			return fmt.Errorf("%w: dma unmap [%#x, %#x) splits mapping [%#x, %#x)", ErrInvalid, iova, end, m.iova, m.end())
		}
		hi++
	}
	if lo == hi {
		return fmt.Errorf("%w: dma unmap [%#x, %#x)", ErrNotMapped, iova, end)
	}
	for _, m := range t.maps[lo:hi] {
		munmapRegion(m)
	}
	t.maps = append(t.maps[:lo], t.maps[hi:]...)
	return nil
}

// UnmapAll removes every mapping.
func (t *DMATable) UnmapAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, m := range t.maps {
		munmapRegion(m)
	}
	t.maps = nil
}

// Regions lists the mappings in address order (File is always nil).
func (t *DMATable) Regions() []DMARegion {
	t.mu.RLock()
	defer t.mu.RUnlock()
	out := make([]DMARegion, len(t.maps))
	for i, m := range t.maps {
		out[i] = DMARegion{IOVA: m.iova, Size: m.size, Offset: m.offset, Prot: m.prot}
	}
	return out
}

// ReadAt copies len(p) bytes of client memory at iova into p. The range may
// span adjacent mappings. It fails, copying nothing, with ErrNotMapped if
// any byte is outside every mapping, ErrNoFD if any byte is in a mapping
// without descriptor, ErrPermission if a mapping is not readable.
func (t *DMATable) ReadAt(p []byte, iova uint64) error {
	return t.access(p, iova, false)
}

// WriteAt copies p to client memory at iova, with ReadAt's rules (a mapping
// without DMAProtWrite fails with ErrPermission).
func (t *DMATable) WriteAt(p []byte, iova uint64) error {
	return t.access(p, iova, true)
}

func (t *DMATable) access(p []byte, iova uint64, write bool) error {
	if len(p) == 0 {
		return nil
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	if err := t.walkLocked(iova, len(p), write, nil); err != nil {
		return err
	}
	return t.walkLocked(iova, len(p), write, func(m *dmaMapping, off uint64, pos, n int) error {
		if write {
			return copyGuarded(m.mem[off:off+uint64(n)], p[pos:pos+n])
		}
		return copyGuarded(p[pos:pos+n], m.mem[off:off+uint64(n)])
	})
}

// walkLocked visits the pieces of [iova, iova+n) mapping by mapping,
// checking each; with fn nil it only checks.
func (t *DMATable) walkLocked(iova uint64, n int, write bool, fn func(m *dmaMapping, off uint64, pos, n int) error) error {
	op, need := "read", DMAProtRead
	if write {
		op, need = "write", DMAProtWrite
	}
	if iova+uint64(n) < iova {
		return fmt.Errorf("vfio: dma %s at %#x+%d: %w", op, iova, n, ErrNotMapped)
	}
	i := t.firstEndingAfterLocked(iova)
	addr, pos := iova, 0
	for pos < n {
		if i >= len(t.maps) || t.maps[i].iova > addr {
			return fmt.Errorf("vfio: dma %s at %#x: %w", op, addr, ErrNotMapped)
		}
		m := t.maps[i]
		if m.mem == nil {
			return fmt.Errorf("vfio: dma %s at %#x in [%#x, %#x): %w", op, addr, m.iova, m.end(), ErrNoFD)
		}
		if m.prot&need == 0 {
			return fmt.Errorf("vfio: dma %s at %#x in [%#x, %#x) prot %#x: %w", op, addr, m.iova, m.end(), m.prot, ErrPermission)
		}
		k := int(min(uint64(n-pos), m.end()-addr))
		if fn != nil {
			if err := fn(m, addr-m.iova, pos, k); err != nil {
				return fmt.Errorf("vfio: dma %s at %#x: %w", op, addr, err)
			}
		}
		pos += k
		addr += uint64(k)
		i++
	}
	return nil
}
