package sim

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/memprobe"
)

// hostile is a vGPU client (QEMU and guest together) that tries every way
// it has to reach memory that is not its vGPU's: through the aperture
// descriptor, trapped region accesses, GTT entries and commands. Every
// attempt must be refused; one that is not is reported.
type hostile struct {
	bus     *Bus
	d       *guest.Driver
	memSize uint64
	rng     *rand.Rand
	own     uint64 // graphics address of a page the hostile allocated for itself

	aperture *os.File // the aperture descriptor, as the server passed it
	wide     []byte   // aperture mapped from offset 0 over the whole pool's length

	refused int // attempts that were refused, as they must be
}

// newHostile attaches to dev and maps its aperture descriptor over
// poolSize bytes, as far as a client could hope to reach.
func newHostile(t *testing.T, dev *device, poolSize uint64) *hostile {
	t.Helper()
	b := attach(t, dev, Options{NoIRQ: true})
	h := &hostile{bus: b, d: open(t, b, guest.Options{Seed: 99}), rng: rand.New(rand.NewPCG(99, 1))}
	h.memSize = h.d.MemSize()
	var err error
	if h.own, err = h.d.Alloc(abi.PageSize); err != nil {
		t.Fatal(err)
	}
	ri, err := b.Client().RegionInfo(abi.BARAperture)
	if err != nil || ri.File == nil {
		t.Fatalf("aperture descriptor: %+v, %v", ri, err)
	}
	h.aperture = ri.File
	t.Cleanup(func() { h.aperture.Close() })
	if h.wide, err = unix.Mmap(int(ri.File.Fd()), 0, int(poolSize), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		t.Fatalf("mapping the aperture descriptor over %#x bytes: %v", poolSize, err)
	}
	t.Cleanup(func() { unix.Munmap(h.wide) })
	return h
}

// round makes every attempt once. It reports through t.Errorf, so it may
// run on any goroutine while the test lives.
func (h *hostile) round(ctx context.Context, t *testing.T) {
	for _, attack := range []func(context.Context) error{
		h.descriptor, h.regions, h.gtt, h.commands, h.stillWorks,
	} {
		if err := attack(ctx); err != nil {
			t.Errorf("hostile client: %v", err)
		}
	}
}

// refuse counts an attempt that failed; one that succeeded is an error.
func (h *hostile) refuse(what string, err error) error {
	if err == nil {
		return fmt.Errorf("%s was not refused", what)
	}
	h.refused++
	return nil
}

// descriptor attacks through the aperture descriptor: its size, mappings
// past its end, reads and writes past its end.
func (h *hostile) descriptor(context.Context) error {
	var errs []error
	var st unix.Stat_t
	if err := unix.Fstat(int(h.aperture.Fd()), &st); err != nil || uint64(st.Size) != h.memSize {
		errs = append(errs, fmt.Errorf("aperture descriptor is %d bytes (%v), MEM_SIZE %d", st.Size, err, h.memSize))
	}
	fd := int(h.aperture.Fd())
	_, werr := h.aperture.WriteAt([]byte{0xee}, int64(h.memSize))
	errs = append(errs,
		h.refuse("shrinking the aperture", unix.Ftruncate(fd, 0)),
		h.refuse("growing the aperture", unix.Ftruncate(fd, int64(len(h.wide)))),
		h.refuse("fallocate past the aperture", unix.Fallocate(fd, 0, int64(h.memSize), abi.PageSize)),
		h.refuse("pwrite past the aperture", werr),
	)
	past := h.wide[h.memSize:]
	if faults, landed := memprobe.StoreAll(past, abi.PageSize, 0xee); landed != 0 {
		errs = append(errs, fmt.Errorf("%d stores past the aperture landed (%d faulted)", landed, faults))
	} else {
		h.refused += faults
	}
	if faults, seen := memprobe.LoadAll(past, abi.PageSize); len(seen) != 0 {
		errs = append(errs, fmt.Errorf("%d loads past the aperture succeeded (%d faulted)", len(seen), faults))
	}
	return errors.Join(errs...)
}

// regions attacks through trapped region accesses past the aperture and
// the GTT window, and to regions that do not exist.
func (h *hostile) regions(context.Context) error {
	c, p := h.bus.Client(), make([]byte, 8)
	return errors.Join(
		h.refuse("a region write at MEM_SIZE", c.WriteRegion(abi.BARAperture, h.memSize, p)),
		h.refuse("a region write across MEM_SIZE", c.WriteRegion(abi.BARAperture, h.memSize-4, p)),
		h.refuse("a region read far past MEM_SIZE", c.ReadRegion(abi.BARAperture, 1<<40, p)),
		h.refuse("a region write to an absent BAR", c.WriteRegion(1, 0, p)),
		h.refuse("a region write past BAR0", c.WriteRegion(abi.BARRegs, abi.BAR0Size, p)),
	)
}

// gtt writes entries that name pages outside the partition, or set
// reserved bits: each is refused with ERR_STATUS.GTT_ENTRY and the entry
// keeps its value.
func (h *hostile) gtt(context.Context) error {
	pages := h.memSize / abi.PageSize
	const index = 3 // mapped by the driver: a refusal must leave it so
	off := uint32(abi.GTTOffset + abi.GTTEntrySize*index)
	before, err := h.bus.ReadReg64(off)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range []uint64{
		guest.GTTEntry(pages, true),                              // the page just past the partition
		guest.GTTEntry(2*pages+7, true),                          // a neighbour's, were it placed after
		guest.GTTEntry(abi.GTTPageMask>>abi.GTTPageShift, false), // the largest page number
		before | 1<<5, // a reserved bit (bits 2-11, docs/device-abi.md §3.1)
	} {
		if err := h.bus.WriteGTT(index, []uint64{e}); err != nil {
			return err
		}
		var de *guest.DeviceError
		if err := h.d.CheckErrors(); !errors.As(err, &de) || !de.Has(abi.ErrGTTEntry) || de.GTTIndex != index {
			errs = append(errs, fmt.Errorf("GTT entry %#x: %v, want a GTT_ENTRY refusal of index %d", e, err, index))
			continue
		}
		if after, err := h.bus.ReadReg64(off); err != nil || after != before {
			errs = append(errs, fmt.Errorf("GTT entry %#x: entry now %#x (%v), was %#x", e, after, err, before))
			continue
		}
		h.refused++
	}
	return errors.Join(errs...)
}

// commands submits commands that reach past the GTT's mappings and guest
// RAM, and garbage; each must fail with its error bit and leave the ring
// usable.
func (h *hostile) commands(ctx context.Context) error {
	mapped, ram, own := h.d.MappedSize(), uint64(len(h.bus.RAM())), h.own
	garbage := make([]byte, 64)
	for i := range garbage {
		garbage[i] = byte(h.rng.Uint32())
	}
	guest.AppendHeader(garbage[:0], uint16(9+h.rng.IntN(0xfff0)), 0, 64) // an opcode the ABI lacks
	var errs []error
	for _, c := range []struct {
		what string
		cmd  []byte
		want uint32
	}{
		{"DMA from past guest RAM", guest.AppendDMAToGfx(nil, own, ram, abi.PageSize), abi.ErrDMA},
		{"DMA far past guest RAM", guest.AppendDMAToGfx(nil, own, 1<<40, abi.PageSize), abi.ErrDMA},
		{"DMA out to past guest RAM", guest.AppendDMAFromGfx(nil, own, ram-8, abi.PageSize), abi.ErrDMA},
		{"COPY from unmapped graphics memory", guest.AppendCopy(nil, own, mapped, abi.PageSize), abi.ErrPageFault},
		{"FILL of unmapped graphics memory", guest.AppendFill(nil, 1<<40, abi.PageSize, 0xeeeeeeee), abi.ErrPageFault},
		{"COPY across the end of the GTT", guest.AppendCopy(nil, own, uint64(h.d.GTTEntries())*abi.PageSize-8, 64), abi.ErrPageFault},
		{"LAUNCH of no kernel", guest.AppendLaunch(nil, 77, 1, 2, 3, 4), abi.ErrKernel},
		{"garbage", garbage, abi.ErrCommand},
	} {
		if err := h.d.Submit(c.cmd); err != nil {
			return fmt.Errorf("%s: submitting: %w", c.what, err)
		}
		err := h.d.Sync(ctx)
		var de *guest.DeviceError
		if !errors.As(err, &de) || !de.Has(c.want) {
			errs = append(errs, fmt.Errorf("%s: %v, want device error %s", c.what, err, guest.ErrBitNames(c.want)))
			continue
		}
		h.refused++
	}
	return errors.Join(errs...)
}

// stillWorks checks that the hostile's own vGPU still serves it: a FILL
// of its own page lands.
func (h *hostile) stillWorks(ctx context.Context) error {
	pattern := h.rng.Uint32()
	if err := h.d.Fill(h.own, abi.PageSize, pattern); err != nil {
		return err
	}
	if err := h.d.Sync(ctx); err != nil {
		return fmt.Errorf("own FILL after the attacks: %w", err)
	}
	got := make([]byte, 4)
	if err := h.d.ReadGA(h.own+abi.PageSize-4, got); err != nil {
		return err
	}
	if v := binary.LittleEndian.Uint32(got); v != pattern {
		return fmt.Errorf("own FILL read back %#x, want %#x", v, pattern)
	}
	return nil
}
