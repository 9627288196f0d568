package pci

import (
	"encoding/binary"
	"fmt"
)

// Writes lists the guest's configuration writes, compacted for replay into
// a destination QEMU's front end after migration (docs/migration-protocol.md §2.2):
// one Write per register with its current value, for each register the
// guest wrote that no longer holds its power-on value (a fresh front end
// already holds those). The order is the safe replay order: BARs by
// ascending offset (a 64-bit BAR low half first), the interrupt line, MSI
// address low and high, MSI data, MSI control (the enable bit), and the
// command register last, so that nothing is decoded or signalled before it
// is in place.
func (c *Config) Writes() []Write {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var ws []Write
	for _, r := range c.regs {
		if !c.writtenLocked(r) {
			continue
		}
		v, reset := c.valueLocked(&c.space, r), c.valueLocked(&c.reset, r)
		if v == reset {
			continue
		}
		ws = append(ws, Write{Offset: r.off, Size: r.size, Value: v})
	}
	return ws
}

// writtenLocked reports whether a guest write touched register r.
func (c *Config) writtenLocked(r register) bool {
	for o := r.off; o < r.off+uint32(r.size); o++ {
		if c.written[o] {
			return true
		}
	}
	return false
}

// valueLocked reads register r from space.
func (c *Config) valueLocked(space *[Size]byte, r register) uint32 {
	switch r.size {
	case 1:
		return uint32(space[r.off])
	case 2:
		return uint32(binary.LittleEndian.Uint16(space[r.off:]))
	default:
		return binary.LittleEndian.Uint32(space[r.off:])
	}
}

// State is a Config's saved contents: the 256 bytes and, per byte, whether a
// guest write touched it. It is plain data.
type State struct {
	Space   [Size]byte
	Written [Size]bool
}

// Save captures the space and the record of guest writes.
func (c *Config) Save() State {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return State{Space: c.space, Written: c.written}
}

// Restore loads s. Every read-only bit of s must equal this Config's (same
// identity, BAR layout and capabilities), and only writable bytes may be
// marked written; otherwise the error wraps ErrMismatch and nothing changes.
func (c *Config) Restore(s State) error {
	for o := range Size {
		diff := (s.Space[o] ^ c.reset[o]) &^ c.wmask[o]
		if o == OffStatus {
			diff &^= StatusInterrupt // device-driven, not identity
		}
		if diff != 0 {
			return fmt.Errorf("%w: read-only byte %#x is %#02x, want %#02x", ErrMismatch, o, s.Space[o], c.reset[o])
		}
		if s.Written[o] && c.wmask[o] == 0 {
			return fmt.Errorf("%w: read-only byte %#x marked written", ErrMismatch, o)
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.space = s.Space
	c.written = s.Written
	return nil
}
