package sysfs

import (
	"encoding/binary"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// hugePage is the size of the hugetlb pages DMA memory is made of; each is
// physically contiguous.
const hugePage = 2 << 20

// hugeMemory is locked hugetlb memory handed out in page-aligned pieces that
// never cross a huge page, so each piece is physically contiguous.
type hugeMemory struct {
	mem  []byte
	phys []uint64 // physical address of each huge page
	next uint64   // first free byte
}

// newHugeMemory maps size bytes (rounded up to huge pages) of locked
// hugetlb memory and looks up each page's physical address. The kernel must
// have huge pages reserved (/proc/sys/vm/nr_hugepages).
func newHugeMemory(size uint64) (*hugeMemory, error) {
	size = (size + hugePage - 1) &^ (hugePage - 1)
	mem, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_HUGETLB|unix.MAP_POPULATE|unix.MAP_LOCKED)
	if err != nil {
		return nil, fmt.Errorf("sysfs: mapping %d bytes of huge pages (are huge pages reserved?): %w", size, err)
	}
	h := &hugeMemory{mem: mem}
	pm, err := os.Open("/proc/self/pagemap")
	if err != nil {
		h.close()
		return nil, fmt.Errorf("sysfs: %w", err)
	}
	defer pm.Close()
	for off := uint64(0); off < size; off += hugePage {
		pa, err := physAddr(pm, &mem[off])
		if err != nil {
			h.close()
			return nil, err
		}
		h.phys = append(h.phys, pa)
	}
	return h, nil
}

// physAddr reads the physical address of the page holding p from pagemap
// (Documentation/admin-guide/mm/pagemap.rst: bit 63 present, bits 0-54 PFN).
func physAddr(pagemap *os.File, p *byte) (uint64, error) {
	va := uint64(uintptrOf(p))
	var e [8]byte
	if _, err := pagemap.ReadAt(e[:], int64(va/uint64(os.Getpagesize()))*8); err != nil {
		return 0, fmt.Errorf("sysfs: reading pagemap: %w", err)
	}
	v := binary.LittleEndian.Uint64(e[:])
	pfn := v & (1<<55 - 1)
	if v>>63 == 0 || pfn == 0 {
		return 0, fmt.Errorf("sysfs: page at %#x not present or PFN hidden (need root)", va)
	}
	return pfn * uint64(os.Getpagesize()), nil
}

// Alloc implements guest.DMAMemory.
func (h *hugeMemory) Alloc(n uint64) (uint64, []byte, error) {
	n = (n + 4095) &^ 4095
	if n == 0 || n > hugePage {
		return 0, nil, fmt.Errorf("sysfs: DMA buffer of %d bytes (at most %d)", n, hugePage)
	}
	start := h.next
	if start/hugePage != (start+n-1)/hugePage {
		start = (start + hugePage - 1) &^ (hugePage - 1)
	}
	if start+n > uint64(len(h.mem)) {
		return 0, nil, fmt.Errorf("sysfs: DMA memory exhausted (%d bytes)", len(h.mem))
	}
	h.next = start + n
	gpa := h.phys[start/hugePage] + start%hugePage
	return gpa, h.mem[start : start+n : start+n], nil
}

func (h *hugeMemory) close() {
	if h.mem != nil {
		_ = unix.Munmap(h.mem)
		h.mem = nil
	}
}
