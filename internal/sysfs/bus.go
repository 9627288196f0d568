package sysfs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/guest"
)

// ErrNotFound means no PCI function with the vGPU's IDs exists.
var ErrNotFound = errors.New("sysfs: no gmig vGPU found")

// Options configure Open.
type Options struct {
	SysRoot string // default "/sys"
	DMASize uint64 // bytes of hugetlb DMA memory; default 8 MiB
	// IRQ is how interrupts arrive (irq.go); the modules it needs must be
	// loaded. IRQNone, the zero value, polls.
	IRQ     IRQMode
	DevRoot string // default "/dev"
}

// Bus is a vGPU reached through sysfs.
type Bus struct {
	dir      string // /sys/bus/pci/devices/DDDD:BB:DD.F
	regs     []byte
	aperture []byte
	dma      *hugeMemory
	irqMode  IRQMode
	irq      irqSource   // nil with IRQNone
	vfio     *vfioDevice // with IRQMSI
}

var _ guest.Bus = (*Bus)(nil)

// Find returns the sysfs directory of the first function with the vGPU's
// vendor and device IDs.
func Find(sysRoot string) (string, error) {
	devs, err := filepath.Glob(filepath.Join(sysRoot, "bus/pci/devices/*"))
	if err != nil {
		return "", err
	}
	for _, d := range devs {
		v, verr := readHex(filepath.Join(d, "vendor"))
		id, derr := readHex(filepath.Join(d, "device"))
		if verr == nil && derr == nil && v == abi.PCIVendorID && id == abi.PCIDeviceID {
			return d, nil
		}
	}
	return "", fmt.Errorf("%w among %d PCI functions", ErrNotFound, len(devs))
}

func readHex(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(string(b)), "0x"), 16, 64)
}

// Open finds the vGPU, enables it (memory decoding and bus mastering), maps
// its BARs and sets up DMA memory and interrupts (opts.IRQ).
func Open(opts Options) (*Bus, error) {
	if opts.SysRoot == "" {
		opts.SysRoot = "/sys"
	}
	if opts.DevRoot == "" {
		opts.DevRoot = "/dev"
	}
	if opts.DMASize == 0 {
		opts.DMASize = 8 << 20
	}
	dir, err := Find(opts.SysRoot)
	if err != nil {
		return nil, err
	}
	b := &Bus{dir: dir}
	if err := b.open(opts); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

func (b *Bus) open(opts Options) error {
	b.irqMode = opts.IRQ
	var err error
	if opts.IRQ == IRQMSI {
		// vfio-pci takes the device first: it enables the device when
		// opened, and sysfs refuses to enable a device that has a driver.
		if b.vfio, err = openVFIO(b.dir, opts.SysRoot, opts.DevRoot); err != nil {
			return err
		}
	} else if err := releaseDriver(b.dir, vfioPCIDriver); err != nil {
		// A vfio-pci left bound by an earlier Open would keep the device
		// from being enabled, and from uio_pci_generic.
		return err
	}
	if err := enable(b.dir); err != nil {
		return err
	}
	if err := b.setCommand(pciCommandMemory|pciCommandBusMaster, 0); err != nil {
		return err
	}
	if b.regs, err = mapResource(filepath.Join(b.dir, "resource0")); err != nil {
		return err
	}
	if b.aperture, err = mapResource(filepath.Join(b.dir, "resource2")); err != nil {
		return err
	}
	if b.dma, err = newHugeMemory(opts.DMASize); err != nil {
		return err
	}
	b.irq, err = b.openIRQ(opts)
	return err
}

// openIRQ sets up the interrupt source of opts.IRQ (nil for IRQNone).
func (b *Bus) openIRQ(opts Options) (irqSource, error) {
	switch opts.IRQ {
	case IRQNone:
		return nil, nil
	case IRQINTx:
		u, err := bindUIO(b, opts.SysRoot, opts.DevRoot)
		if err != nil {
			return nil, err
		}
		return u, nil
	case IRQMSI:
		if err := b.vfio.mapDMA(b.dma); err != nil {
			return nil, err
		}
		m, err := b.vfio.enableMSI()
		if err != nil {
			return nil, err
		}
		return m, nil
	}
	return nil, fmt.Errorf("sysfs: %v", opts.IRQ)
}

// enable enables the device (memory decoding) through sysfs, unless it is
// enabled already: vfio-pci enables the device it opens, and sysfs refuses
// to enable a device that has a driver.
func enable(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "enable"))
	if err == nil && strings.TrimSpace(string(b)) != "0" {
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, "enable"), []byte("1"), 0); err != nil {
		return fmt.Errorf("sysfs: enabling %s: %w", dir, err)
	}
	return nil
}

// PCI command register bits (PCI 3.0 §6.2.2).
const (
	pciCommandMemory      = 1 << 1
	pciCommandBusMaster   = 1 << 2
	pciCommandINTxDisable = 1 << 10
	pciCommandOffset      = 0x04
)

// setCommand sets and clears bits of the command register through the
// device's sysfs config file.
func (b *Bus) setCommand(set, clear uint16) error {
	f, err := os.OpenFile(filepath.Join(b.dir, "config"), os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("sysfs: config space: %w", err)
	}
	defer f.Close()
	var c [2]byte
	if _, err := f.ReadAt(c[:], pciCommandOffset); err != nil {
		return fmt.Errorf("sysfs: reading the command register: %w", err)
	}
	v := binary.LittleEndian.Uint16(c[:])&^clear | set
	binary.LittleEndian.PutUint16(c[:], v)
	if _, err := f.WriteAt(c[:], pciCommandOffset); err != nil {
		return fmt.Errorf("sysfs: writing the command register: %w", err)
	}
	return nil
}

func mapResource(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_SYNC, 0)
	if err != nil {
		return nil, fmt.Errorf("sysfs: %w", err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("sysfs: %w", err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(fi.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("sysfs: mapping %s (%d bytes): %w", path, fi.Size(), err)
	}
	return m, nil
}

// Dir is the device's sysfs directory.
func (b *Bus) Dir() string { return b.dir }

func (b *Bus) check(off uint32, n uint32) error {
	if off%n != 0 || uint64(off)+uint64(n) > uint64(len(b.regs)) {
		return fmt.Errorf("sysfs: register access of %d bytes at %#x", n, off)
	}
	return nil
}

// ReadReg32 implements guest.Bus.
func (b *Bus) ReadReg32(off uint32) (uint32, error) {
	if err := b.check(off, 4); err != nil {
		return 0, err
	}
	return load32(b.regs, off), nil
}

// WriteReg32 implements guest.Bus.
func (b *Bus) WriteReg32(off uint32, v uint32) error {
	if err := b.check(off, 4); err != nil {
		return err
	}
	store32(b.regs, off, v)
	return nil
}

// ReadReg64 implements guest.Bus.
func (b *Bus) ReadReg64(off uint32) (uint64, error) {
	if err := b.check(off, 8); err != nil {
		return 0, err
	}
	return load64(b.regs, off), nil
}

// WriteReg64 implements guest.Bus.
func (b *Bus) WriteReg64(off uint32, v uint64) error {
	if err := b.check(off, 8); err != nil {
		return err
	}
	store64(b.regs, off, v)
	return nil
}

// WriteGTT implements guest.Bus with one 8-byte store per entry.
func (b *Bus) WriteGTT(first uint32, entries []uint64) error {
	for i, e := range entries {
		if err := b.WriteReg64(abi.GTTOffset+(first+uint32(i))*abi.GTTEntrySize, e); err != nil {
			return err
		}
	}
	return nil
}

// Aperture implements guest.Bus.
func (b *Bus) Aperture() []byte { return b.aperture }

// DMA implements guest.Bus.
func (b *Bus) DMA() guest.DMAMemory { return b.dma }

// WaitIRQ implements guest.Bus: it blocks until the device signals an
// interrupt (INTx through /dev/uioN, re-enabled after it fired, or an MSI
// on its eventfd). The caller acknowledges the cause in INT_STATUS, which
// deasserts INTx and lets the next cause send a new MSI.
func (b *Bus) WaitIRQ(ctx context.Context) error {
	if b.irq == nil {
		return guest.ErrNoIRQ
	}
	return b.irq.wait(ctx)
}

// IRQMode is how the bus receives interrupts.
func (b *Bus) IRQMode() IRQMode { return b.irqMode }

// IRQCount is the number of interrupts received: INTx firings that
// uio_pci_generic handled, as of the last WaitIRQ, or every MSI message
// since MSI was enabled (those WaitIRQ took and those that arrived while
// the driver polled). Not safe concurrently with WaitIRQ.
func (b *Bus) IRQCount() uint64 {
	if b.irq == nil {
		return 0
	}
	return b.irq.count()
}

// VFIO describes how the device was opened through VFIO (IRQMSI); ok is
// false otherwise.
func (b *Bus) VFIO() (info VFIOInfo, ok bool) {
	if b.vfio == nil {
		return VFIOInfo{}, false
	}
	return b.vfio.info(), true
}

// Close closes the interrupt source and VFIO device and unmaps
// everything.
func (b *Bus) Close() error {
	if b.irq != nil {
		_ = b.irq.close()
		b.irq = nil
	}
	if b.vfio != nil {
		b.vfio.close()
		b.vfio = nil
	}
	for _, m := range [][]byte{b.regs, b.aperture} {
		if m != nil {
			_ = unix.Munmap(m)
		}
	}
	b.regs, b.aperture = nil, nil
	if b.dma != nil {
		b.dma.close()
	}
	return nil
}
