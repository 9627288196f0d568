package guest

import (
	"encoding/binary"
	"math/rand/v2"

	"github.com/gmig-dev/gmig/abi"
)

// Prefill gives a fraction fill of mem's pages seeded contents — a
// guest's textures and weights, resident in graphics memory — and leaves
// the others as they are. mem is graphics memory in page order: a vGPU's
// aperture as the guest maps it, or its partition as the host does (the
// two agree page for page, so a host and a guest prefill the same pages
// alike). Pages with skip[p] set are passed over (they hold the driver's
// ring and the workload's data); skip may be nil or short. Which pages are
// filled, and with what, depends only on seed and fill: each page's bytes
// are one seeded 4 KiB block with the page's number in its first and last
// words, so that every page differs from every other while the work per
// page is one copy (cheap where every store is slow: a guest under TCG
// writes the aperture through QEMU's device emulation). It returns the
// number of pages filled.
func Prefill(mem []byte, fill float64, seed int64, skip []bool) int {
	if fill <= 0 {
		return 0
	}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x66696c6c)) // "fill"
	var block [abi.PageSize]byte
	for i := 0; i < len(block); i += 8 {
		binary.LittleEndian.PutUint64(block[i:], rng.Uint64())
	}
	n := 0
	for p := 0; (p+1)*abi.PageSize <= len(mem); p++ {
		if rng.Float64() >= fill || p < len(skip) && skip[p] {
			continue
		}
		tag := uint64(seed)<<32 ^ uint64(p)
		binary.LittleEndian.PutUint64(block[0:], tag)
		binary.LittleEndian.PutUint64(block[abi.PageSize-8:], ^tag)
		copy(mem[p*abi.PageSize:(p+1)*abi.PageSize], block[:])
		n++
	}
	return n
}

// allocatedAperture marks the aperture pages that back the driver's
// allocations (its ring and fence slot, the workload's region): what a
// prefill must not overwrite.
func (d *Driver) allocatedAperture() []bool {
	skip := make([]bool, d.memSize>>abi.PageShift)
	for ga, n := range d.alloc.used {
		for pg := ga >> abi.PageShift; pg < (ga+n)>>abi.PageShift; pg++ {
			skip[d.perm[pg]] = true
		}
	}
	return skip
}
