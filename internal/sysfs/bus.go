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
	UseUIO  bool   // bind uio_pci_generic and deliver interrupts through /dev/uioN
	DevRoot string // default "/dev"
}

// Bus is a vGPU reached through sysfs.
type Bus struct {
	dir      string // /sys/bus/pci/devices/DDDD:BB:DD.F
	regs     []byte
	aperture []byte
	dma      *hugeMemory
	uio      *os.File
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
// its BARs and sets up DMA memory and, with UseUIO, interrupts.
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
	if err := os.WriteFile(filepath.Join(b.dir, "enable"), []byte("1"), 0); err != nil {
		return fmt.Errorf("sysfs: enabling %s: %w", b.dir, err)
	}
	if err := b.setCommand(pciCommandMemory|pciCommandBusMaster, 0); err != nil {
		return err
	}
	var err error
	if b.regs, err = mapResource(filepath.Join(b.dir, "resource0")); err != nil {
		return err
	}
	if b.aperture, err = mapResource(filepath.Join(b.dir, "resource2")); err != nil {
		return err
	}
	if b.dma, err = newHugeMemory(opts.DMASize); err != nil {
		return err
	}
	if opts.UseUIO {
		if b.uio, err = bindUIO(b.dir, opts.SysRoot, opts.DevRoot); err != nil {
			return err
		}
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

// WaitIRQ implements guest.Bus: it blocks on /dev/uioN until INTx fires,
// then re-enables INTx. The caller acknowledges the cause in
// INT_STATUS, which deasserts the line.
func (b *Bus) WaitIRQ(ctx context.Context) error {
	if b.uio == nil {
		return guest.ErrNoIRQ
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	var n [4]byte
	for {
		fds := []unix.PollFd{{Fd: int32(b.uio.Fd()), Events: unix.POLLIN}}
		ms := 100
		if dl, ok := ctx.Deadline(); ok {
			ms = max(0, min(ms, int(timeUntilMillis(dl))))
		}
		k, err := unix.Poll(fds, ms)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("sysfs: polling uio: %w", err)
		}
		if k > 0 {
			break
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
	if _, err := b.uio.Read(n[:]); err != nil {
		return fmt.Errorf("sysfs: reading uio: %w", err)
	}
	// uio_pci_generic masked INTx with the command register's INTx-disable
	// bit and has no irqcontrol: user space unmasks it in config space.
	if err := b.setCommand(0, pciCommandINTxDisable); err != nil {
		return fmt.Errorf("sysfs: re-enabling INTx: %w", err)
	}
	return nil
}

// Close unmaps everything and closes the uio device.
func (b *Bus) Close() error {
	for _, m := range [][]byte{b.regs, b.aperture} {
		if m != nil {
			_ = unix.Munmap(m)
		}
	}
	b.regs, b.aperture = nil, nil
	if b.dma != nil {
		b.dma.close()
	}
	if b.uio != nil {
		_ = b.uio.Close()
	}
	return nil
}
