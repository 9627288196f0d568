package guest

import (
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"slices"

	"github.com/gmig-dev/gmig/abi"
)

// malformedCommands are framing errors (docs/device-abi.md §5), each a
// multiple of 8 bytes so it can sit in the ring.
func malformedCommands() map[string][]byte {
	withFlags := func(b []byte, flags uint16) []byte {
		binary.LittleEndian.PutUint16(b[2:], flags)
		return b
	}
	withSize := func(b []byte, size uint32) []byte {
		binary.LittleEndian.PutUint32(b[4:], size)
		return b
	}
	return map[string][]byte{
		"unknown opcode":   append(AppendHeader(nil, 0x77, 0, 16), make([]byte, 8)...),
		"reserved flags":   withFlags(AppendCopy(nil, 0, 0, 0), 1),
		"fence bad flags":  withFlags(AppendFence(nil, 0, 1, 0), 1<<2),
		"size mismatch":    withSize(append(AppendFill(nil, 0, 0, 0), make([]byte, 8)...), 40),
		"nop odd size":     withSize(AppendNop(nil, 16), 12),
		"nop oversized":    AppendNop(nil, 264),
		"too many args":    AppendLaunch(nil, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9),
		"launch args size": withSize(AppendLaunch(nil, 1, 1, 2, 3, 4), 40),
	}
}

// checkMalformed submits, for each framing error, a batch [FILL a, bad,
// FILL b, FENCE]: FILL a runs, the rest of the batch is dropped (the fence
// with it) and ERR_STATUS.COMMAND names the bad command's ring offset.
func checkMalformed(s *suite) error {
	d := s.d
	cmds := malformedCommands()
	for i, name := range slices.Sorted(maps.Keys(cmds)) {
		a, b := s.base+scrGeneral+uint64(8*i), s.base+scrGeneral+1024+uint64(8*i)
		if err := d.Fill(a, 8, 0xaaaa0000|uint32(i)); err != nil {
			return err
		}
		RefFill(s.ref, a-s.base, 8, 0xaaaa0000|uint32(i))
		at := d.tail
		if err := d.Submit(cmds[name]); err != nil {
			return err
		}
		if err := d.Fill(b, 8, 0xbbbb0000|uint32(i)); err != nil {
			return err
		}
		err := s.sync()
		var de *DeviceError
		if !errors.Is(err, ErrFenceLost) || !errors.As(err, &de) || !de.Has(abi.ErrCommand) {
			return fmt.Errorf("%s: wait returned %v, want a lost fence and a command error", name, err)
		}
		if de.RingOffset != at {
			return fmt.Errorf("%s: ERR_RING_OFFSET %#x, command was at %#x", name, de.RingOffset, at)
		}
		if err := s.expect(scrGeneral, 2048); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	return s.sync()
}

// spare returns the suite's spare page: its graphics address, GTT index and
// the entry the driver gave it.
func (s *suite) spare() (ga uint64, index uint32, entry uint64) {
	ga = s.base + scrSpare
	index = uint32(ga >> abi.PageShift)
	return ga, index, GTTEntry(uint64(s.d.perm[index]), true)
}

// checkPageFault unmaps the spare page, then maps it read-only: commands
// writing it fault (ERR_STATUS.PAGE_FAULT, the command skipped) while the
// next command in the batch still runs; reads of the read-only page work.
func checkPageFault(s *suite) error {
	d := s.d
	ga, idx, entry := s.spare()
	defer d.bus.WriteGTT(idx, []uint64{entry})
	for _, e := range []uint64{0, entry &^ abi.GTTWritable} {
		if err := d.bus.WriteGTT(idx, []uint64{e}); err != nil {
			return err
		}
		at := d.tail
		if err := d.Fill(ga, 64, 0xdeadbeef); err != nil {
			return err
		}
		if err := d.Fill(s.base+scrGeneral, 16, uint32(e)|1); err != nil {
			return err
		}
		RefFill(s.ref, scrGeneral, 16, uint32(e)|1)
		de, err := s.expectDeviceError(abi.ErrPageFault)
		if err != nil {
			return fmt.Errorf("entry %#x: %w", e, err)
		}
		if de.Opcode != abi.OpFill || de.RingOffset != at {
			return fmt.Errorf("entry %#x: ERR_OPCODE %d at %#x, want FILL at %#x", e, de.Opcode, de.RingOffset, at)
		}
		if err := s.expect(scrGeneral, 16); err != nil {
			return fmt.Errorf("entry %#x: the command after the fault: %w", e, err)
		}
	}
	// A FENCE whose write faults does not complete (§6): the wait ends
	// with a lost fence and a page fault.
	if err := d.bus.WriteGTT(idx, []uint64{0}); err != nil {
		return err
	}
	v := d.FenceAt(abi.FenceWriteMem, ga)
	err := d.Wait(s.ctx, v)
	var de *DeviceError
	if !errors.Is(err, ErrFenceLost) || !errors.As(err, &de) || !de.Has(abi.ErrPageFault) || de.Opcode != abi.OpFence {
		return fmt.Errorf("fence writing an unmapped page: wait returned %v, want a lost fence and a page fault", err)
	}
	if err := d.bus.WriteGTT(idx, []uint64{entry &^ abi.GTTWritable}); err != nil {
		return err
	}
	// Read-only still reads.
	if err := d.Copy(s.base+scrGeneral+64, ga+100, 300); err != nil {
		return err
	}
	RefCopy(s.ref, scrGeneral+64, scrSpare+100, 300)
	if err := s.sync(); err != nil {
		return fmt.Errorf("reading a read-only page: %w", err)
	}
	if err := d.bus.WriteGTT(idx, []uint64{entry}); err != nil {
		return err
	}
	return s.expectAll()
}

func checkDMAFault(s *suite) error {
	at := s.d.tail
	if err := s.d.DMAToGfx(s.base+scrGeneral, 1<<44, 64); err != nil {
		return err
	}
	de, err := s.expectDeviceError(abi.ErrDMA)
	if err != nil {
		return err
	}
	if de.Opcode != abi.OpDMAToGfx || de.RingOffset != at {
		return fmt.Errorf("ERR_OPCODE %d at %#x, want DMA_TO_GFX at %#x", de.Opcode, de.RingOffset, at)
	}
	if err := s.d.DMAFromGfx(s.base+scrGeneral, 1<<44, 64); err != nil {
		return err
	}
	if _, err := s.expectDeviceError(abi.ErrDMA); err != nil {
		return fmt.Errorf("DMA_FROM_GFX: %w", err)
	}
	return s.expect(scrGeneral, 64<<10)
}

// checkGTTRefused writes GTT entries the device must refuse — an aperture
// page beyond MEM_SIZE, a reserved bit — and checks ERR_STATUS.GTT_ENTRY,
// ERR_GTT_INDEX and that the entry kept its value and still works.
func checkGTTRefused(s *suite) error {
	d := s.d
	ga, idx, entry := s.spare()
	bad := []uint64{
		GTTEntry(d.memSize>>abi.PageShift, true),
		GTTEntry(1<<39, true),
		entry | 1<<2,
		entry | 1<<60,
	}
	for _, e := range bad {
		if err := d.bus.WriteGTT(idx, []uint64{e}); err != nil {
			return err
		}
		err := d.CheckErrors()
		var de *DeviceError
		if !errors.As(err, &de) || !de.Has(abi.ErrGTTEntry) || de.GTTIndex != idx {
			return fmt.Errorf("entry %#x at %d: got %v, want a GTT_ENTRY error at index %d", e, idx, err, idx)
		}
		got, err := d.bus.ReadReg64(abi.GTTOffset + abi.GTTEntrySize*idx)
		if err != nil {
			return err
		}
		if got != entry {
			return fmt.Errorf("refused entry %#x: entry %d reads %#x, want %#x unchanged", e, idx, got, entry)
		}
	}
	if d.gttEntries < abi.GTTMaxEntries {
		if err := d.bus.WriteGTT(d.gttEntries, []uint64{entry}); err != nil {
			return err
		}
		var de *DeviceError
		if err := d.CheckErrors(); !errors.As(err, &de) || !de.Has(abi.ErrMMIO) {
			return fmt.Errorf("write past GTT_ENTRIES: got %v, want an MMIO error", err)
		}
	}
	if err := d.Fill(ga, abi.PageSize, 0x600d600d); err != nil {
		return err
	}
	RefFill(s.ref, scrSpare, abi.PageSize, 0x600d600d)
	if err := s.sync(); err != nil {
		return err
	}
	return s.expect(scrSpare, abi.PageSize)
}

func checkDoorbell(s *suite) error {
	d := s.d
	if err := s.sync(); err != nil {
		return err
	}
	for _, tail := range []uint32{d.flushed + 4, d.ringSize, d.ringSize + 8} {
		if err := d.bus.WriteReg32(abi.RegDoorbell, tail); err != nil {
			return err
		}
		var de *DeviceError
		if err := d.CheckErrors(); !errors.As(err, &de) || !de.Has(abi.ErrDoorbell) {
			return fmt.Errorf("doorbell %#x: got %v, want a DOORBELL error", tail, err)
		}
		got, err := d.bus.ReadReg32(abi.RegRingTail)
		if err != nil {
			return err
		}
		if got != d.flushed {
			return fmt.Errorf("doorbell %#x: RING_TAIL %#x, want %#x unchanged", tail, got, d.flushed)
		}
	}
	return s.sync()
}

func checkMMIO(s *suite) error {
	d := s.d
	v, err := d.bus.ReadReg32(abi.RegScratch + 2)
	if err != nil {
		return errSkip{fmt.Sprintf("bus refuses a misaligned access itself: %v", err)}
	}
	if v != 0xffffffff {
		return fmt.Errorf("misaligned read returned %#x, want all ones", v)
	}
	var de *DeviceError
	if err := d.CheckErrors(); !errors.As(err, &de) || !de.Has(abi.ErrMMIO) {
		return fmt.Errorf("misaligned read: got %v, want an MMIO error", err)
	}
	return s.sync()
}
