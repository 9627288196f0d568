package pci

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sync"
)

// Errors callers branch on.
var (
	ErrIdentity = errors.New("pci: invalid identity")
	ErrBAR      = errors.New("pci: invalid BAR")
	ErrRange    = errors.New("pci: access outside configuration space")
	ErrMismatch = errors.New("pci: state does not match this device")
)

// Identity is what the read-only header says about the function.
type Identity struct {
	VendorID, DeviceID       uint16
	SubVendorID, SubDeviceID uint16
	Revision                 uint8
	ClassCode                uint32 // 24 bits: class << 16 | subclass << 8 | programming interface
	InterruptPin             uint8  // 0 none, 1..4 INTA..INTD
}

// BAR describes one memory BAR. Size 0 means absent. A nonzero size must be
// a power of two of at least 16 bytes (QEMU aborts on anything else), and at
// most 2 GiB for a 32-bit BAR. A Mem64 BAR at index i also uses i+1.
type BAR struct {
	Size         uint64
	Mem64        bool
	Prefetchable bool
}

// Write is one configuration register write: Size (1, 2 or 4) bytes of Value
// at Offset.
type Write struct {
	Offset uint32
	Size   uint8
	Value  uint32
}

// register names a guest-writable register for Writes.
type register struct {
	off  uint32
	size uint8
}

// Config is one function's configuration space.
type Config struct {
	reset [Size]byte // power-on contents
	wmask [Size]byte // guest-writable bits of each byte
	bars  [NumBARs]BAR
	msi   bool
	regs  []register // writable registers, in replay order

	mu      sync.RWMutex
	space   [Size]byte
	written [Size]bool // a guest write touched this byte's writable bits
}

// New builds the configuration space of a function with identity id, BARs
// bars and, if msi, an MSI capability at MSIOffset.
func New(id Identity, bars [NumBARs]BAR, msi bool) (*Config, error) {
	if id.ClassCode > 0xffffff {
		return nil, fmt.Errorf("%w: class code %#x wider than 24 bits", ErrIdentity, id.ClassCode)
	}
	if id.InterruptPin > 4 {
		return nil, fmt.Errorf("%w: interrupt pin %d, want 0..4", ErrIdentity, id.InterruptPin)
	}
	if err := checkBARs(bars); err != nil {
		return nil, err
	}
	c := &Config{bars: bars, msi: msi}
	r := &c.reset
	le := binary.LittleEndian
	le.PutUint16(r[OffVendorID:], id.VendorID)
	le.PutUint16(r[OffDeviceID:], id.DeviceID)
	r[OffRevision] = id.Revision
	r[OffClassCode] = byte(id.ClassCode)
	r[OffClassCode+1] = byte(id.ClassCode >> 8)
	r[OffClassCode+2] = byte(id.ClassCode >> 16)
	le.PutUint16(r[OffSubVendorID:], id.SubVendorID)
	le.PutUint16(r[OffSubDeviceID:], id.SubDeviceID)
	r[OffIntPin] = id.InterruptPin
	le.PutUint16(c.wmask[OffCommand:], commandWritable)
	c.wmask[OffIntLine] = 0xff

	for i := 0; i < NumBARs; i++ {
		b := bars[i]
		if b.Size == 0 {
			continue
		}
		off := OffBAR0 + 4*i
		var flags uint32
		if b.Mem64 {
			flags |= BARMem64
		}
		if b.Prefetchable {
			flags |= BARPrefetchable
		}
		le.PutUint32(r[off:], flags)
		addrMask := ^(b.Size - 1)
		le.PutUint32(c.wmask[off:], uint32(addrMask)&^barFlagsMask)
		c.regs = append(c.regs, register{uint32(off), 4})
		if b.Mem64 {
			le.PutUint32(c.wmask[off+4:], uint32(addrMask>>32))
			c.regs = append(c.regs, register{uint32(off + 4), 4})
			i++
		}
	}
	c.regs = append(c.regs, register{OffIntLine, 1})

	if msi {
		le.PutUint16(r[OffStatus:], StatusCapList)
		r[OffCapPtr] = MSIOffset
		r[MSIOffset] = CapIDMSI
		r[MSIOffset+1] = 0 // end of the list
		le.PutUint16(r[OffMSIControl:], MSIControl64Bit)
		c.wmask[OffMSIControl] = MSIControlEnable
		le.PutUint32(c.wmask[OffMSIAddrLo:], 0xfffffffc)
		le.PutUint32(c.wmask[OffMSIAddrHi:], 0xffffffff)
		le.PutUint16(c.wmask[OffMSIData:], 0xffff)
		c.regs = append(c.regs,
			register{OffMSIAddrLo, 4}, register{OffMSIAddrHi, 4}, register{OffMSIData, 2},
			register{OffMSIControl, 2})
	}
	c.regs = append(c.regs, register{OffCommand, 2})
	c.space = c.reset
	return c, nil
}

// checkBARs validates BAR sizes and 64-bit pairing.
func checkBARs(bars [NumBARs]BAR) error {
	for i := 0; i < NumBARs; i++ {
		b := bars[i]
		switch {
		case b.Size == 0:
			if b.Mem64 || b.Prefetchable {
				return fmt.Errorf("%w: BAR%d is absent but has flags", ErrBAR, i)
			}
			continue
		case b.Size < 16 || bits.OnesCount64(b.Size) != 1:
			return fmt.Errorf("%w: BAR%d size %#x is not a power of two >= 16", ErrBAR, i, b.Size)
		case !b.Mem64 && b.Size > 1<<31:
			return fmt.Errorf("%w: BAR%d size %#x too large for a 32-bit BAR", ErrBAR, i, b.Size)
		case b.Mem64 && i == NumBARs-1:
			return fmt.Errorf("%w: BAR%d is 64-bit but is the last BAR", ErrBAR, i)
		case b.Mem64 && bars[i+1] != (BAR{}):
			return fmt.Errorf("%w: BAR%d is 64-bit but BAR%d is not empty", ErrBAR, i, i+1)
		}
		if b.Mem64 {
			i++
		}
	}
	return nil
}

// checkAccess validates an access of n bytes at off.
func checkAccess(off uint64, n int) error {
	if n < 1 || n > Size || off >= Size || off+uint64(n) > Size {
		return fmt.Errorf("%w: %d bytes at %#x", ErrRange, n, off)
	}
	return nil
}

// Read fills p (1..256 bytes) from offset off, little-endian.
func (c *Config) Read(off uint64, p []byte) error {
	if err := checkAccess(off, len(p)); err != nil {
		return err
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	copy(p, c.space[off:])
	return nil
}

// Write stores p (1..256 bytes) at offset off. Each byte changes only in its
// writable bits; writes to read-only bytes are ignored.
func (c *Config) Write(off uint64, p []byte) error {
	if err := checkAccess(off, len(p)); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, v := range p {
		o := int(off) + i
		m := c.wmask[o]
		if m == 0 {
			continue
		}
		c.space[o] = c.space[o]&^m | v&m
		c.written[o] = true
	}
	return nil
}

// u16Locked and u32Locked read little-endian fields of the space.
func (c *Config) u16Locked(off int) uint16 { return binary.LittleEndian.Uint16(c.space[off:]) }
func (c *Config) u32Locked(off int) uint32 { return binary.LittleEndian.Uint32(c.space[off:]) }

// Command is the command register.
func (c *Config) Command() uint16 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.u16Locked(OffCommand)
}

// INTxDisabled reports the command register's INTx-disable bit.
func (c *Config) INTxDisabled() bool { return c.Command()&CommandINTxDisable != 0 }

// BARAddress is the address programmed into BAR i (both halves for a 64-bit
// BAR), or 0 for an absent BAR, the upper half of a 64-bit BAR, or i out of
// range. During size probing it is the probe pattern, as for the guest.
func (c *Config) BARAddress(i int) uint64 {
	if i < 0 || i >= NumBARs || c.bars[i].Size == 0 {
		return 0
	}
	off := OffBAR0 + 4*i
	c.mu.RLock()
	defer c.mu.RUnlock()
	addr := uint64(c.u32Locked(off) &^ barFlagsMask)
	if c.bars[i].Mem64 {
		addr |= uint64(c.u32Locked(off+4)) << 32
	}
	return addr
}

// MSIEnabled reports whether the guest enabled MSI.
func (c *Config) MSIEnabled() bool {
	if !c.msi {
		return false
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.space[OffMSIControl]&MSIControlEnable != 0
}

// MSIMessage is the MSI address and data the guest programmed (zero without
// an MSI capability).
func (c *Config) MSIMessage() (addr uint64, data uint16) {
	if !c.msi {
		return 0, 0
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	addr = uint64(c.u32Locked(OffMSIAddrLo)) | uint64(c.u32Locked(OffMSIAddrHi))<<32
	return addr, c.u16Locked(OffMSIData)
}

// SetInterruptStatus sets the status register's interrupt-status bit, which
// reflects the function's INTx state whether or not INTx is disabled (PCI
// 3.0 §6.2.3). Guests use it to tell whether a shared line is theirs (Linux's
// pci_check_and_mask_intx, which uio_pci_generic relies on).
func (c *Config) SetInterruptStatus(asserted bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if asserted {
		c.space[OffStatus] |= StatusInterrupt
	} else {
		c.space[OffStatus] &^= StatusInterrupt
	}
}

// Reset returns the space to its power-on contents (BARs, command, interrupt
// line and MSI cleared) and forgets which registers were written.
func (c *Config) Reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.space = c.reset
	c.written = [Size]bool{}
}
