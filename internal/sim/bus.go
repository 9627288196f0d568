package sim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/vfio"
)

// Options configure Attach.
type Options struct {
	// RAMSize is guest RAM in bytes (DMA-mapped at IOVA 0); 0 means
	// DefaultRAMSize.
	RAMSize uint64
	// MSI enables the MSI capability and signals through it instead of INTx.
	MSI bool
	// NoIRQ wires no interrupt at all: WaitIRQ returns guest.ErrNoIRQ.
	NoIRQ bool
	// GTTPerEntry writes the GTT one 8-byte store per entry, as a real guest
	// does, instead of batching entries into one region write.
	GTTPerEntry bool
	// RAM, if set, is the guest RAM to use instead of a fresh memfd: a
	// simulator that re-attaches to a migration's destination keeps its RAM,
	// as QEMU's migration carries it. Its size must be RAMSize (or RAMSize
	// 0 to take the file's). The Bus duplicates the descriptor; the caller
	// keeps its own.
	RAM *os.File
}

// DefaultRAMSize is the guest RAM Attach creates by default.
const DefaultRAMSize = 64 << 20

// Bus is a guest.Bus over a vfio-user connection, with simulated guest RAM.
type Bus struct {
	c    *vfio.Client
	opts Options

	ramFile *os.File
	ram     []byte
	dma     ram

	apertureFile *os.File
	apertureSize uint64
	aperture     []byte

	irq irqs

	closeOnce sync.Once
	closeErr  error
}

var _ guest.Bus = (*Bus)(nil)

// Attach connects to the vGPU served at socketPath and brings it up as QEMU
// and guest firmware would. Close releases everything.
func Attach(socketPath string, opts Options) (*Bus, error) {
	if opts.RAMSize == 0 && opts.RAM != nil {
		fi, err := opts.RAM.Stat()
		if err != nil {
			return nil, fmt.Errorf("sim: guest RAM file: %w", err)
		}
		opts.RAMSize = uint64(fi.Size())
	}
	if opts.RAMSize == 0 {
		opts.RAMSize = DefaultRAMSize
	}
	if opts.RAMSize%abi.PageSize != 0 {
		return nil, fmt.Errorf("sim: RAM size %#x is not page aligned", opts.RAMSize)
	}
	c, err := vfio.Dial(socketPath)
	if err != nil {
		return nil, err
	}
	b := &Bus{c: c, opts: opts}
	if err := b.attach(); err != nil {
		b.Close()
		return nil, err
	}
	return b, nil
}

func (b *Bus) attach() error {
	info, err := b.c.DeviceInfo()
	if err != nil {
		return fmt.Errorf("sim: device info: %w", err)
	}
	if info.Flags&vfio.DeviceFlagPCI == 0 || info.NumRegions <= vfio.PCIConfigRegionIndex {
		return fmt.Errorf("sim: not a PCI device (flags %#x, %d regions)", info.Flags, info.NumRegions)
	}
	if b.opts.RAM != nil {
		b.ramFile, b.ram, err = reuseRAM(b.opts.RAM, b.opts.RAMSize)
	} else {
		b.ramFile, b.ram, err = newMemfd("gmig-guest-ram", b.opts.RAMSize)
	}
	if err != nil {
		return err
	}
	b.dma = ram{mem: b.ram}
	if err := b.c.MapDMA(vfio.DMARegion{
		IOVA: 0, Size: b.opts.RAMSize, Offset: 0,
		Prot: vfio.DMAProtRead | vfio.DMAProtWrite, File: b.ramFile,
	}); err != nil {
		return fmt.Errorf("sim: mapping guest RAM for DMA: %w", err)
	}
	if err := b.mapAperture(); err != nil {
		return err
	}
	if err := b.programConfig(); err != nil {
		return err
	}
	return b.setupIRQs()
}

func (b *Bus) mapAperture() error {
	regs, err := b.c.RegionInfo(abi.BARRegs)
	if err != nil {
		return fmt.Errorf("sim: BAR0 info: %w", err)
	}
	if regs.File != nil {
		regs.File.Close()
	}
	if regs.Size != abi.BAR0Size {
		return fmt.Errorf("sim: BAR0 is %#x bytes, want %#x", regs.Size, abi.BAR0Size)
	}
	ri, err := b.c.RegionInfo(abi.BARAperture)
	if err != nil {
		return fmt.Errorf("sim: aperture info: %w", err)
	}
	b.apertureFile, b.apertureSize = ri.File, ri.Size
	if ri.File == nil || ri.Flags&vfio.RegionFlagMmap == 0 {
		return fmt.Errorf("sim: the aperture is not mmap-able (flags %#x)", ri.Flags)
	}
	if len(ri.Sparse) > 1 || len(ri.Sparse) == 1 && (ri.Sparse[0].Offset != 0 || ri.Sparse[0].Size != ri.Size) {
		return fmt.Errorf("sim: the aperture is only partly mmap-able: %+v", ri.Sparse)
	}
	if b.aperture, err = mapShared(ri.File, ri.Offset, ri.Size); err != nil {
		return fmt.Errorf("sim: mapping the aperture: %w", err)
	}
	return nil
}

// Close disconnects and releases RAM, the aperture and the eventfds. The
// device keeps its state for the next client.
func (b *Bus) Close() error {
	b.closeOnce.Do(func() {
		errs := []error{b.c.Close(), unmap(b.aperture), unmap(b.ram)}
		b.aperture, b.ram = nil, nil
		for _, f := range []*os.File{b.apertureFile, b.ramFile} {
			if f != nil {
				errs = append(errs, f.Close())
			}
		}
		errs = append(errs, b.irq.close())
		b.closeErr = errors.Join(errs...)
	})
	return b.closeErr
}

// Client is the underlying vfio-user client.
func (b *Bus) Client() *vfio.Client { return b.c }

// Options is what the Bus was attached with.
func (b *Bus) Options() Options { return b.opts }

// RAM is guest RAM (GPA = offset).
func (b *Bus) RAM() []byte { return b.ram }

// RAMFile returns the guest RAM's memfd, for a later Attach with
// Options.RAM (valid until Close).
func (b *Bus) RAMFile() *os.File { return b.ramFile }

// ReadReg32 implements guest.Bus.
func (b *Bus) ReadReg32(off uint32) (uint32, error) {
	var p [4]byte
	if err := b.c.ReadRegion(abi.BARRegs, uint64(off), p[:]); err != nil {
		return 0, fmt.Errorf("sim: reading BAR0 %#x: %w", off, err)
	}
	return binary.LittleEndian.Uint32(p[:]), nil
}

// WriteReg32 implements guest.Bus.
func (b *Bus) WriteReg32(off uint32, v uint32) error {
	p := binary.LittleEndian.AppendUint32(make([]byte, 0, 4), v)
	if err := b.c.WriteRegion(abi.BARRegs, uint64(off), p); err != nil {
		return fmt.Errorf("sim: writing BAR0 %#x: %w", off, err)
	}
	return nil
}

// ReadReg64 implements guest.Bus.
func (b *Bus) ReadReg64(off uint32) (uint64, error) {
	var p [8]byte
	if err := b.c.ReadRegion(abi.BARRegs, uint64(off), p[:]); err != nil {
		return 0, fmt.Errorf("sim: reading BAR0 %#x: %w", off, err)
	}
	return binary.LittleEndian.Uint64(p[:]), nil
}

// WriteReg64 implements guest.Bus.
func (b *Bus) WriteReg64(off uint32, v uint64) error {
	p := binary.LittleEndian.AppendUint64(make([]byte, 0, 8), v)
	if err := b.c.WriteRegion(abi.BARRegs, uint64(off), p); err != nil {
		return fmt.Errorf("sim: writing BAR0 %#x: %w", off, err)
	}
	return nil
}

// WriteGTT implements guest.Bus: one region write for all entries, or one
// 8-byte write per entry with Options.GTTPerEntry.
func (b *Bus) WriteGTT(first uint32, entries []uint64) error {
	if len(entries) == 0 {
		return nil
	}
	off := uint64(abi.GTTOffset) + abi.GTTEntrySize*uint64(first)
	p := make([]byte, 0, abi.GTTEntrySize*len(entries))
	for _, e := range entries {
		p = binary.LittleEndian.AppendUint64(p, e)
	}
	if !b.opts.GTTPerEntry {
		if err := b.c.WriteRegion(abi.BARRegs, off, p); err != nil {
			return fmt.Errorf("sim: writing %d GTT entries at %d: %w", len(entries), first, err)
		}
		return nil
	}
	for i := 0; i < len(p); i += abi.GTTEntrySize {
		if err := b.c.WriteRegion(abi.BARRegs, off+uint64(i), p[i:i+abi.GTTEntrySize]); err != nil {
			return fmt.Errorf("sim: writing GTT entry %d: %w", first+uint32(i/abi.GTTEntrySize), err)
		}
	}
	return nil
}

// Aperture implements guest.Bus.
func (b *Bus) Aperture() []byte { return b.aperture }

// DMA implements guest.Bus.
func (b *Bus) DMA() guest.DMAMemory { return &b.dma }

// ram hands out page-aligned pieces of guest RAM, bump-allocated.
type ram struct {
	mu   sync.Mutex
	mem  []byte
	next uint64
}

// Alloc implements guest.DMAMemory.
func (r *ram) Alloc(n uint64) (uint64, []byte, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	n = (n + abi.PageSize - 1) &^ (abi.PageSize - 1)
	if n == 0 || n > uint64(len(r.mem))-r.next {
		return 0, nil, fmt.Errorf("sim: guest RAM exhausted: %#x bytes wanted, %#x left", n, uint64(len(r.mem))-r.next)
	}
	gpa := r.next
	r.next += n
	return gpa, r.mem[gpa : gpa+n : gpa+n], nil
}
