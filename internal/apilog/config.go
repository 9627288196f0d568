package apilog

import "github.com/gmig-dev/gmig/internal/pci"

// Replay ranks of a config write: writes replay by rank, then by offset.
// MSI's message control (PCI 3.0 §6.8.1; the capability sits where package
// pci places it) replays after every other register, so that the enable
// bit lands once the message address and data are in place, and the
// command register (§6.2.2) last, so that a front end decodes BARs and
// lets the function signal only after everything else holds its value.
// pci.Config.Writes uses the same order.
const (
	rankOther = iota
	rankMSIControl
	rankCommand
)

// configSpace is what the guest wrote to its function's configuration
// space (pci.Size bytes, conventional space: the vGPU's config region is no
// larger): per byte, the last value written and whether any write touched
// it. Keeping bytes rather than writes is what makes compaction exact for
// any mix of sizes and overlaps: a byte write into an earlier word write
// changes that byte and nothing else.
type configSpace struct {
	value   [pci.Size]byte
	written [pci.Size]bool
}

// record stores a config write: the low size bytes of v, little-endian, at
// off. Sizes 1, 2 and 4 are taken at any offset, aligned or not; a write
// of another size or reaching past config space is ignored (the vfio-user
// server refuses such accesses before they reach the log).
func (c *configSpace) record(off uint16, size uint8, v uint32) {
	if (size != 1 && size != 2 && size != 4) || int(off)+int(size) > pci.Size {
		return
	}
	for i := range int(size) {
		c.value[int(off)+i] = byte(v >> (8 * i))
		c.written[int(off)+i] = true
	}
}

// writes returns c's canonical writes (canonical) as log entries in replay
// order: by rank, then by offset.
func (c *configSpace) writes() []Entry {
	var ranked [rankCommand + 1][]Entry
	c.canonical(func(off int, size uint8) {
		var v uint32
		for i := int(size) - 1; i >= 0; i-- {
			v = v<<8 | uint32(c.value[off+i])
		}
		r := replayRank(off)
		ranked[r] = append(ranked[r], Entry{Kind: ConfigWrite, Offset: uint16(off), Size: size, Arg: v})
	})
	var out []Entry
	for _, es := range ranked {
		out = append(out, es...)
	}
	return out
}

// count is len(c.writes()) without building them.
func (c *configSpace) count() int {
	n := 0
	c.canonical(func(int, uint8) { n++ })
	return n
}

// canonical calls fn, in offset order, for the fewest naturally aligned
// writes that write each written byte exactly once and no other: a dword
// where all four bytes of an aligned dword were written, else a word where
// both bytes of an aligned word were, else bytes. A dword holding the
// command register or MSI control is not merged, so that those registers
// replay on their own.
func (c *configSpace) canonical(fn func(off int, size uint8)) {
	for d := 0; d < pci.Size; d += 4 {
		if c.all(d, 4) && replayRank(d) == rankOther && replayRank(d+2) == rankOther {
			fn(d, 4)
			continue
		}
		for w := d; w < d+4; w += 2 {
			if c.all(w, 2) {
				fn(w, 2)
				continue
			}
			for o := w; o < w+2; o++ {
				if c.written[o] {
					fn(o, 1)
				}
			}
		}
	}
}

// all reports whether every byte of [off, off+n) was written.
func (c *configSpace) all(off, n int) bool {
	for o := off; o < off+n; o++ {
		if !c.written[o] {
			return false
		}
	}
	return true
}

// replayRank is the rank of the aligned word holding byte off.
func replayRank(off int) int {
	switch off &^ 1 {
	case pci.OffCommand:
		return rankCommand
	case pci.OffMSIControl:
		return rankMSIControl
	}
	return rankOther
}
