package guest

import (
	"fmt"
	"math/rand/v2"

	"github.com/gmig-dev/gmig/abi"
)

// gttChunk is how many entries mapGTT hands the bus at once.
const gttChunk = 512

// GTTEntry builds a valid GTT entry (docs/device-abi.md §3.1) naming
// aperture page page; writable adds abi.GTTWritable.
func GTTEntry(page uint64, writable bool) uint64 {
	e := page<<abi.GTTPageShift | abi.GTTValid
	if writable {
		e |= abi.GTTWritable
	}
	return e
}

// Permutation returns a seeded permutation of n aperture pages: graphics
// page i maps to aperture page Permutation(seed, n)[i].
func Permutation(seed int64, n int) []uint32 {
	r := rand.New(rand.NewPCG(uint64(seed), 0x676d6967)) // "gmig"
	p := make([]uint32, n)
	for i := range p {
		p[i] = uint32(i)
	}
	r.Shuffle(n, func(i, j int) { p[i], p[j] = p[j], p[i] })
	return p
}

// mapGTT maps graphics pages [0, min(memory pages, GTT entries)) onto a
// seeded permutation of aperture pages, writable, and sets up the
// allocator over that range.
func (d *Driver) mapGTT() error {
	pages := d.memSize >> abi.PageShift
	perm := Permutation(d.opts.Seed, int(pages))
	if uint64(d.gttEntries) < pages {
		perm = perm[:d.gttEntries]
	}
	if err := d.writeGTT(perm); err != nil {
		return err
	}
	d.perm = perm
	d.alloc.init(uint64(len(perm)) << abi.PageShift)
	return nil
}

// writeGTT programs the entries of perm, writable, and checks the device
// took them.
func (d *Driver) writeGTT(perm []uint32) error {
	entries := make([]uint64, 0, gttChunk)
	for first := 0; first < len(perm); first += gttChunk {
		entries = entries[:0]
		for _, p := range perm[first:min(first+gttChunk, len(perm))] {
			entries = append(entries, GTTEntry(uint64(p), true))
		}
		if err := d.bus.WriteGTT(uint32(first), entries); err != nil {
			return fmt.Errorf("guest: writing GTT entries at %d: %w", first, err)
		}
	}
	if err := d.CheckErrors(); err != nil {
		return fmt.Errorf("guest: programming the GTT: %w", err)
	}
	return nil
}

// ApertureOffset translates graphics address ga into its aperture offset
// through the driver's GTT mapping.
func (d *Driver) ApertureOffset(ga uint64) (uint64, error) {
	pg := ga >> abi.PageShift
	if pg >= uint64(len(d.perm)) {
		return 0, fmt.Errorf("guest: graphics address %#x is not mapped", ga)
	}
	return uint64(d.perm[pg])<<abi.PageShift | ga&(abi.PageSize-1), nil
}

// WriteGA stores p at graphics address ga with CPU stores through the
// aperture, page by page through the GTT mapping. The device does not see
// these stores.
func (d *Driver) WriteGA(ga uint64, p []byte) error {
	return d.apertureRange(ga, uint64(len(p)), func(ap []byte, i uint64) { copy(ap, p[i:]) })
}

// ReadGA loads len(p) bytes at graphics address ga through the aperture.
func (d *Driver) ReadGA(ga uint64, p []byte) error {
	return d.apertureRange(ga, uint64(len(p)), func(ap []byte, i uint64) { copy(p[i:], ap) })
}

// apertureRange calls fn for each page-bounded piece of [ga, ga+n) with the
// aperture bytes of that piece and its offset from ga.
func (d *Driver) apertureRange(ga, n uint64, fn func(ap []byte, i uint64)) error {
	if end := ga + n; end < ga || end > d.MappedSize() {
		return fmt.Errorf("guest: graphics range [%#x, +%#x) outside the mapped %#x bytes", ga, n, d.MappedSize())
	}
	ap := d.bus.Aperture()
	for i := uint64(0); i < n; {
		off, _ := d.ApertureOffset(ga + i)
		k := min(abi.PageSize-(ga+i)&(abi.PageSize-1), n-i)
		fn(ap[off:off+k], i)
		i += k
	}
	return nil
}
