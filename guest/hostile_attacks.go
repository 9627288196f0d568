package guest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/gmig-dev/gmig/abi"
)

// The attacks of a Hostile (hostile.go). Each makes its attempts, checks
// each is refused with the error bits docs/device-abi.md gives it, keeps
// the scratch model up to date with what the ABI says valid commands do,
// and leaves the driver usable.

// uncontained collects an attack's attempts the device did not contain
// (ErrNotContained); add returns any other error, which ends the attack.
type uncontained []error

func (u *uncontained) add(err error) error {
	if err != nil && !errors.Is(err, ErrNotContained) {
		return err
	}
	*u = append(*u, err)
	return nil
}

// record counts an attempt; ok false is one that was not refused.
func (h *Hostile) record(what string, ok bool, got string) error {
	h.count(func(s *HostileStats) {
		s.Attempts++
		if ok {
			s.Refused++
		} else {
			s.Failures++
		}
	})
	if !ok {
		return fmt.Errorf("%w: %s: %s", ErrNotContained, what, got)
	}
	return nil
}

// spareEntry is the spare page's GTT index, register offset and the entry
// the driver gave it.
func (h *Hostile) spareEntry() (idx, off uint32, entry uint64) {
	idx = uint32(h.spare >> abi.PageShift)
	return idx, abi.GTTOffset + abi.GTTEntrySize*idx, GTTEntry(uint64(h.d.perm[idx]), true)
}

// attackGTT writes entries naming pages outside the partition, with
// reserved bits, as 4-byte halves, and past GTT_ENTRIES: each is refused
// with GTT_ENTRY (MMIO past the end) and the entry keeps its value.
func (h *Hostile) attackGTT() error {
	d, bus := h.d, h.d.bus
	pages := d.memSize >> abi.PageShift
	idx, off, entry := h.spareEntry()
	var errs []error
	check := func(what string, want uint32) {
		err := d.CheckErrors()
		var de *DeviceError
		ok := errors.As(err, &de) && de.Has(want) && (want != abi.ErrGTTEntry || de.GTTIndex == idx)
		got, rerr := bus.ReadReg64(off)
		if rerr != nil {
			errs = append(errs, rerr)
			return
		}
		detail := fmt.Sprintf("%v, entry now %#x (was %#x)", err, got, entry)
		errs = append(errs, h.record(what, ok && got == entry, detail))
	}
	// Bit 2 is reserved, but on a device with local memory it names a
	// local page (GTTLocal, docs/device-abi.md §3): there the reserved low
	// bits start at 3, and a local entry just past LOCAL_MEM_SIZE is one
	// more to refuse.
	low := 2
	entries := []uint64{
		GTTEntry(pages, true),                             // the page just past the partition
		GTTEntry(pages+1+h.rng.Uint64N(1<<24), true),      // a neighbour's, were it placed after
		GTTEntry(abi.GTTPageMask>>abi.GTTPageShift, true), // the largest page number
	}
	if d.Caps()&abi.CapLocalMem != 0 {
		low = 3
		entries = append(entries, GTTEntry(d.LocalMemSize()>>abi.PageShift, true)|abi.GTTLocal)
	}
	entries = append(entries,
		entry|1<<(low+h.rng.IntN(12-low)), // a reserved low bit
		entry|1<<(52+h.rng.IntN(12)),      // a reserved high bit
	)
	for _, e := range entries {
		if err := bus.WriteGTT(idx, []uint64{e}); err != nil {
			return err
		}
		check(fmt.Sprintf("GTT entry %#x at index %d", e, idx), abi.ErrGTTEntry)
	}
	// Halves: the high half alone moves the page 4 GiB up, or sets bit 63.
	for _, hi := range []uint32{1, 1 << 31} {
		if err := bus.WriteReg32(off+4, uint32(entry>>32)|hi); err != nil {
			return err
		}
		check(fmt.Sprintf("GTT high half %#x at index %d", hi, idx), abi.ErrGTTEntry)
	}
	if d.gttEntries < abi.GTTMaxEntries {
		if err := bus.WriteGTT(d.gttEntries, []uint64{entry}); err != nil {
			return err
		}
		err := d.CheckErrors()
		var de *DeviceError
		errs = append(errs, h.record("GTT entry past GTT_ENTRIES", errors.As(err, &de) && de.Has(abi.ErrMMIO), fmt.Sprint(err)))
	}
	return errors.Join(errs...)
}

// attackDMA asks for DMA outside guest RAM both ways, across the top of
// the address space, and into unmapped graphics memory.
func (h *Hostile) attackDMA(ctx context.Context) error {
	d := h.d
	gpa := d.stagingGPA
	var errs []error
	for _, c := range []struct {
		what string
		cmd  []byte
		want uint32
	}{
		{"DMA in from far past guest RAM", AppendDMAToGfx(nil, h.scratch, 1<<44, abi.PageSize), abi.ErrDMA},
		{"DMA out to far past guest RAM", AppendDMAFromGfx(nil, h.scratch, 1<<44, abi.PageSize), abi.ErrDMA},
		{"DMA in from the top of the address space", AppendDMAToGfx(nil, h.scratch, 1<<63|h.rng.Uint64N(1<<40)&^7, 64), abi.ErrDMA},
		{"DMA wrapping around 2^64", AppendDMAToGfx(nil, h.scratch, ^uint64(0)-abi.PageSize+1, 2*abi.PageSize), abi.ErrCommand},
		{"DMA into unmapped graphics memory", AppendDMAToGfx(nil, 1<<40, gpa, abi.PageSize), abi.ErrPageFault},
		{"DMA out of unmapped graphics memory", AppendDMAFromGfx(nil, d.MappedSize(), gpa, abi.PageSize), abi.ErrPageFault},
		{"DMA of 2^40 bytes", AppendDMAFromGfx(nil, h.scratch, gpa, 1<<40), abi.ErrPageFault},
	} {
		if err := h.submitRefused(ctx, c.what, c.cmd, c.want); err != nil {
			if !errors.Is(err, ErrNotContained) {
				return err
			}
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// attackCopy submits copies and fills that are oversized, wrap, reach
// unmapped or read-only memory (refused), and valid ones that overlap, in
// graphics addresses or through aliased GTT entries (memmove: the model
// follows them).
func (h *Hostile) attackCopy(ctx context.Context) error {
	d, s := h.d, h.scratch
	var errs uncontained
	add := errs.add
	for _, c := range []struct {
		what string
		cmd  []byte
		want uint32
	}{
		{"COPY of the whole mapped range", AppendCopy(nil, s, s+abi.PageSize, d.MappedSize()), abi.ErrPageFault},
		{"COPY of 2^40 bytes", AppendCopy(nil, s, s, 1<<40), abi.ErrPageFault},
		{"COPY wrapping around 2^64", AppendCopy(nil, s, s, ^uint64(0)-s+abi.PageSize), abi.ErrCommand},
		{"COPY from the top of the address space", AppendCopy(nil, s, ^uint64(0)-7, 64), abi.ErrCommand},
		{"COPY into unmapped graphics memory", AppendCopy(nil, 1<<40, s, abi.PageSize), abi.ErrPageFault},
		{"COPY across the end of the GTT", AppendCopy(nil, uint64(d.gttEntries)*abi.PageSize-64, s, 128), abi.ErrPageFault},
		{"FILL of 2^40 bytes", AppendFill(nil, s, 1<<40, 0xeeeeeeee), abi.ErrPageFault},
		{"FILL misaligned", AppendFill(nil, s+2, 64, 0xeeeeeeee), abi.ErrCommand},
	} {
		if err := add(h.submitRefused(ctx, c.what, c.cmd, c.want)); err != nil {
			return err
		}
	}
	// The spare page read-only: a COPY into it faults.
	idx, _, entry := h.spareEntry()
	if err := d.bus.WriteGTT(idx, []uint64{entry &^ abi.GTTWritable}); err != nil {
		return err
	}
	if err := add(h.submitRefused(ctx, "COPY into a read-only page", AppendCopy(nil, h.spare, s, 64), abi.ErrPageFault)); err != nil {
		return err
	}
	// Overlapping copies inside scratch, both directions: memmove.
	for range 4 {
		n := 1 + h.rng.Uint64N(hostileScratch/2)
		src, dst := h.rng.Uint64N(hostileScratch-n), h.rng.Uint64N(hostileScratch-n)
		if err := d.Copy(s+dst, s+src, n); err != nil {
			return err
		}
		RefCopy(h.model, dst, src, n)
	}
	if err := add(h.refused("overlapping COPYs", d.Sync(ctx), 0)); err != nil {
		return err
	}
	// Aliased: the spare page mapped onto scratch's second page; a COPY
	// from that page to its alias overlaps in memory, not in addresses.
	alias := GTTEntry(uint64(d.perm[(s>>abi.PageShift)+1]), true)
	if err := d.bus.WriteGTT(idx, []uint64{alias}); err != nil {
		return err
	}
	lo, n := h.rng.Uint64N(512), 1+h.rng.Uint64N(2048)
	if err := d.Copy(h.spare+lo+64, s+abi.PageSize+lo, n); err != nil {
		return err
	}
	RefCopy(h.model, abi.PageSize+lo+64, abi.PageSize+lo, n)
	err := d.Sync(ctx)
	if werr := d.bus.WriteGTT(idx, []uint64{entry}); werr != nil {
		return werr
	}
	if err := add(h.refused("COPY onto an aliased page", err, 0)); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// attackRing submits malformed commands, garbage and commands longer than
// what is up to the tail (each drops its batch with COMMAND), rings
// doorbells that are misaligned or out of range (DOORBELL), enables rings
// that are invalid (RING) or unmapped (the fetch faults), and runs a
// command storm.
func (h *Hostile) attackRing(ctx context.Context) error {
	d := h.d
	var errs uncontained
	add := errs.add
	cmds := malformedCommands()
	garbage := make([]byte, 8*(1+h.rng.IntN(32)))
	for i := range garbage {
		garbage[i] = byte(h.rng.Uint32())
	}
	AppendHeader(garbage[:0], uint16(10+h.rng.IntN(0xfff0)), 0, uint32(len(garbage)))
	cmds["garbage"] = garbage
	for _, name := range slices.Sorted(maps.Keys(cmds)) {
		if err := add(h.submitRefused(ctx, name, cmds[name], abi.ErrCommand)); err != nil {
			return err
		}
	}
	// A COPY header promising 32 bytes with 16 up to the tail.
	short := append(AppendHeader(nil, abi.OpCopy, 0, abi.CmdCopySize), make([]byte, 8)...)
	if err := d.Submit(short); err != nil {
		return err
	}
	if err := d.Flush(); err != nil {
		return err
	}
	if err := h.idle(ctx); err != nil {
		return err
	}
	if err := add(h.refused("a command longer than the batch", d.CheckErrors(), abi.ErrCommand)); err != nil {
		return err
	}
	for _, tail := range []uint32{d.flushed + 4, d.ringSize, d.ringSize + 8, ^uint32(0)} {
		if err := d.bus.WriteReg32(abi.RegDoorbell, tail); err != nil {
			return err
		}
		err := d.CheckErrors()
		got, rerr := d.bus.ReadReg32(abi.RegRingTail)
		if rerr != nil {
			return rerr
		}
		var de *DeviceError
		ok := errors.As(err, &de) && de.Has(abi.ErrDoorbell) && got == d.flushed
		if err := add(h.record(fmt.Sprintf("doorbell %#x", tail), ok, fmt.Sprintf("%v, RING_TAIL %#x", err, got))); err != nil {
			return err
		}
	}
	if err := add(h.badRings(ctx)); err != nil {
		return err
	}
	if err := add(h.storm(ctx)); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// badRings disables the ring, tries invalid ones, runs one whose base is
// unmapped, and resets the device to get its own back.
func (h *Hostile) badRings(ctx context.Context) error {
	d, bus := h.d, h.d.bus
	var errs []error
	if err := bus.WriteReg32(abi.RegControl, 0); err != nil {
		return err
	}
	for _, r := range []struct {
		base uint64
		size uint32
	}{{h.scratch, 3000}, {h.scratch, abi.RingMaxSize * 2}, {h.scratch + 8, abi.RingMinSize}} {
		if err := bus.WriteReg64(abi.RegRingBase, r.base); err != nil {
			return err
		}
		if err := bus.WriteReg32(abi.RegRingSize, r.size); err != nil {
			return err
		}
		if err := bus.WriteReg32(abi.RegControl, abi.ControlEnable); err != nil {
			return err
		}
		st, err := bus.ReadReg32(abi.RegStatus)
		if err != nil {
			return err
		}
		cerr := d.CheckErrors()
		var de *DeviceError
		ok := st&abi.StatusEnabled == 0 && errors.As(cerr, &de) && de.Has(abi.ErrRing)
		errs = append(errs, h.record(fmt.Sprintf("ring at %#x of %#x bytes", r.base, r.size), ok, fmt.Sprintf("STATUS %#x, %v", st, cerr)))
	}
	if err := bus.WriteReg32(abi.RegDoorbell, 64); err != nil {
		return err
	}
	cerr := d.CheckErrors()
	var de *DeviceError
	errs = append(errs, h.record("doorbell of a disabled ring", errors.As(cerr, &de) && de.Has(abi.ErrDoorbell), fmt.Sprint(cerr)))
	// A ring in unmapped graphics memory: the fetch faults, the batch drops.
	for _, w := range []struct {
		off uint32
		v   uint64
	}{{abi.RegRingBase, 1 << 40}, {abi.RegRingSize, abi.RingMinSize}, {abi.RegControl, abi.ControlEnable}, {abi.RegDoorbell, 64}} {
		var err error
		if w.off == abi.RegRingBase {
			err = bus.WriteReg64(w.off, w.v)
		} else {
			err = bus.WriteReg32(w.off, uint32(w.v))
		}
		if err != nil {
			return err
		}
	}
	if err := h.waitHead(ctx, 64); err != nil {
		return err
	}
	cerr = d.CheckErrors()
	errs = append(errs, h.record("a ring in unmapped memory", errors.As(cerr, &de) && de.Has(abi.ErrPageFault), fmt.Sprint(cerr)))
	if err := h.reset(); err != nil {
		return err
	}
	return errors.Join(errs...)
}

// storm keeps the ring full of commands for cfg.Storm: NOPs of every size
// and FILLs and COPYs inside scratch (followed by the model), doorbells as
// the ring fills, no waits. Then it waits once: nothing may fail.
func (h *Hostile) storm(ctx context.Context) error {
	d := h.d
	end := time.Now().Add(h.cfg.Storm)
	n := uint64(0)
	for time.Now().Before(end) {
		for range 64 {
			var err error
			switch h.rng.IntN(3) {
			case 0:
				err = d.put(AppendNop(d.buf[:0], uint32(8*(1+h.rng.IntN(32)))))
			case 1:
				off := h.rng.Uint64N(hostileScratch/4) * 4
				k := h.rng.Uint64N((hostileScratch-off)/4+1) * 4
				p := h.rng.Uint32()
				err = d.Fill(h.scratch+off, k, p)
				RefFill(h.model, off, k, p)
			default:
				k := h.rng.Uint64N(4096)
				src, dst := h.rng.Uint64N(hostileScratch-k), h.rng.Uint64N(hostileScratch-k)
				err = d.Copy(h.scratch+dst, h.scratch+src, k)
				RefCopy(h.model, dst, src, k)
			}
			if err != nil {
				return err
			}
			n++
		}
		if err := d.Flush(); err != nil {
			return err
		}
	}
	h.count(func(s *HostileStats) { s.Storms++; s.Commands += n })
	return h.refused(fmt.Sprintf("a storm of %d commands", n), d.Sync(ctx), 0)
}

// idle waits until the engine has consumed everything flushed.
func (h *Hostile) idle(ctx context.Context) error { return h.waitHead(ctx, h.d.flushed) }

// waitHead waits until RING_HEAD is head.
func (h *Hostile) waitHead(ctx context.Context, head uint32) error {
	ctx, cancel := context.WithTimeout(ctx, h.d.opts.Timeout)
	defer cancel()
	var p poller
	for {
		got, err := h.d.bus.ReadReg32(abi.RegRingHead)
		if err != nil {
			return err
		}
		if got == head {
			h.d.head = got
			return nil
		}
		if err := p.wait(ctx); err != nil {
			return fmt.Errorf("guest: hostile: waiting for RING_HEAD %#x (at %#x): %w", head, got, err)
		}
	}
}
