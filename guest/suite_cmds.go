package guest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/gmig-dev/gmig/abi"
)

// Scratch layout of the suite (offsets from suite.base).
const (
	scrGeneral = 0         // fill, copy, DMA: 64 KiB
	scrKernel  = 64 << 10  // kernel buffers: 64 KiB
	scrWrap    = 128 << 10 // ring-wrap slots: 16 KiB
	scrWrapLen = 16 << 10
	scrFence   = 160 << 10 // fence slot
	scrSpare   = suiteScratch - abi.PageSize
)

func checkIdentity(s *suite) error {
	d := s.d
	want := []struct {
		name string
		off  uint32
		want uint64
		w64  bool
	}{
		{"ID", abi.RegID, abi.IDMagic, false},
		{"VERSION", abi.RegVersion, abi.Version, false},
		{"MEM_SIZE", abi.RegMemSize, d.memSize, true},
		{"GTT_ENTRIES", abi.RegGTTEntries, uint64(d.gttEntries), false},
		{"GTT_OFFSET", abi.RegGTTOffset, abi.GTTOffset, false},
	}
	for _, r := range want {
		got, err := readReg(d.bus, r.off, r.w64)
		if err != nil {
			return err
		}
		if got != r.want {
			return fmt.Errorf("%s = %#x, want %#x", r.name, got, r.want)
		}
	}
	if need := uint32(abi.CapKernels | abi.CapFenceMem); d.caps&need != need {
		return fmt.Errorf("CAPS %#x lacks kernels or fence-writes-memory", d.caps)
	}
	return nil
}

func readReg(b Bus, off uint32, w64 bool) (uint64, error) {
	if w64 {
		return b.ReadReg64(off)
	}
	v, err := b.ReadReg32(off)
	return uint64(v), err
}

func checkRegisters(s *suite) error {
	b := s.d.bus
	if err := b.WriteReg32(abi.RegScratch, 0x5a5aa5a5); err != nil {
		return err
	}
	if v, err := b.ReadReg32(abi.RegScratch); err != nil || v != 0x5a5aa5a5 {
		return fmt.Errorf("SCRATCH reads %#x (%v), wrote 0x5a5aa5a5", v, err)
	}
	hb := uint64(time.Now().UnixNano())
	if err := b.WriteReg64(abi.RegHeartbeat, hb); err != nil {
		return err
	}
	if v, err := b.ReadReg64(abi.RegHeartbeat); err != nil || v != hb {
		return fmt.Errorf("HEARTBEAT reads %#x (%v), wrote %#x", v, err, hb)
	}
	// A 64-bit register read as two halves.
	lo, err1 := b.ReadReg32(abi.RegHeartbeat)
	hi, err2 := b.ReadReg32(abi.RegHeartbeat + 4)
	if err := errors.Join(err1, err2); err != nil || uint64(hi)<<32|uint64(lo) != hb {
		return fmt.Errorf("HEARTBEAT halves read %#x:%#x (%v), wrote %#x", hi, lo, err, hb)
	}
	if st, err := b.ReadReg32(abi.RegStatus); err != nil || st&abi.StatusEnabled == 0 {
		return fmt.Errorf("STATUS %#x (%v): ring not enabled", st, err)
	}
	return s.d.CheckErrors()
}

func checkGTTReadback(s *suite) error {
	d := s.d
	n := len(d.perm)
	identity := true
	for _, i := range []int{0, 1, n / 2, n - 1} {
		if i < 0 || i >= n {
			continue
		}
		got, err := d.bus.ReadReg64(abi.GTTOffset + abi.GTTEntrySize*uint32(i))
		if err != nil {
			return err
		}
		if want := GTTEntry(uint64(d.perm[i]), true); got != want {
			return fmt.Errorf("GTT entry %d reads %#x, wrote %#x", i, got, want)
		}
	}
	for i, p := range d.perm {
		if uint32(i) != p {
			identity = false
			break
		}
	}
	if identity && n > 1 {
		return errors.New("the GTT mapping is the identity; translation bugs would hide")
	}
	return nil
}

// checkAperture checks that the CPU's view (through the driver's GTT
// mapping) and the device's (through the shadow GTT) agree: CPU stores
// copied by the device, and device writes read by the CPU at the aperture
// page the GTT names.
func checkAperture(s *suite) error {
	const n = 3*abi.PageSize + 100
	if err := s.randomize(scrGeneral+10, n); err != nil {
		return err
	}
	if err := s.d.Copy(s.base+scrGeneral+32<<10, s.base+scrGeneral+10, n); err != nil {
		return err
	}
	RefCopy(s.ref, scrGeneral+32<<10, scrGeneral+10, n)
	if err := s.sync(); err != nil {
		return err
	}
	if err := s.expect(scrGeneral+32<<10, n); err != nil {
		return fmt.Errorf("device copy of CPU stores: %w", err)
	}
	// Raw aperture bytes at the permuted page.
	ga := s.base + scrGeneral + 32<<10 + abi.PageSize
	off, err := s.d.ApertureOffset(ga)
	if err != nil {
		return err
	}
	ap := s.d.bus.Aperture()
	if i := firstDiff(ap[off:off+64], s.ref[ga-s.base:ga-s.base+64]); i >= 0 {
		return fmt.Errorf("aperture byte %#x (graphics %#x) differs from the model", off+uint64(i), ga+uint64(i))
	}
	return nil
}

func checkFill(s *suite) error {
	cases := []struct{ off, n uint64 }{
		{0, 4}, {abi.PageSize - 4, 8}, {400, 3*abi.PageSize + 12}, {8 << 10, 0}, {20 << 10, 5 * abi.PageSize},
	}
	for i, c := range cases {
		pat := 0x01020304 * uint32(i+1)
		if err := s.d.Fill(s.base+scrGeneral+c.off, c.n, pat); err != nil {
			return err
		}
		RefFill(s.ref, scrGeneral+c.off, c.n, pat)
	}
	if err := s.sync(); err != nil {
		return err
	}
	return s.expect(scrGeneral, 64<<10)
}

func checkCopy(s *suite) error {
	if err := s.randomize(scrGeneral, 64<<10); err != nil {
		return err
	}
	cases := []struct{ dst, src, n uint64 }{
		{40 << 10, 1, 5001},                    // disjoint, unaligned, crosses pages
		{3, 0, 10000},                          // overlapping, dst above src
		{16 << 10, 16<<10 + 4097, 9000},        // overlapping, dst below src
		{50 << 10, 2 << 10, 0},                 // no-op
		{60 << 10, 56 << 10, 4 * abi.PageSize}, // page aligned
	}
	for _, c := range cases {
		if err := s.d.Copy(s.base+c.dst, s.base+c.src, c.n); err != nil {
			return err
		}
		RefCopy(s.ref, c.dst, c.src, c.n)
	}
	if err := s.sync(); err != nil {
		return err
	}
	return s.expect(scrGeneral, 64<<10)
}

func checkDMAToGfx(s *suite) error {
	gpa, stage := s.d.Staging()
	if stage == nil {
		return errSkip{"no DMA memory on this bus"}
	}
	const n = 3*abi.PageSize + 7
	for i := range stage[:n] {
		stage[i] = byte(s.rng.Uint32())
	}
	if err := s.d.DMAToGfx(s.base+scrGeneral+4093, gpa+5, n-5); err != nil {
		return err
	}
	RefDMAToGfx(s.ref, scrGeneral+4093, stage[5:n])
	if err := s.sync(); err != nil {
		return err
	}
	return s.expect(scrGeneral, 64<<10)
}

func checkDMAFromGfx(s *suite) error {
	gpa, stage := s.d.Staging()
	if stage == nil {
		return errSkip{"no DMA memory on this bus"}
	}
	const n = 2*abi.PageSize + 999
	clear(stage[:n+16])
	if err := s.randomize(scrGeneral+8<<10, n); err != nil {
		return err
	}
	if err := s.d.DMAFromGfx(s.base+scrGeneral+8<<10+3, gpa+16, n-3); err != nil {
		return err
	}
	if err := s.sync(); err != nil {
		return err
	}
	want := RefDMAFromGfx(s.ref, scrGeneral+8<<10+3, n-3)
	if i := firstDiff(stage[16:16+n-3], want); i >= 0 {
		return fmt.Errorf("guest RAM byte %d: got %#02x, want %#02x", i, stage[16+i], want[i])
	}
	if stage[15] != 0 || stage[16+n-3] != 0 {
		return errors.New("DMA wrote outside its range")
	}
	return nil
}

func checkFenceWriteMem(s *suite) error {
	for i := range 3 {
		addr := s.base + scrFence + 8*uint64(i)
		v := s.d.FenceAt(abi.FenceWriteMem, addr)
		if err := s.d.Wait(s.ctx, v); err != nil {
			return err
		}
		RefFenceWrite(s.ref, scrFence+8*uint64(i), v)
		if err := s.expect(scrFence, 64); err != nil {
			return fmt.Errorf("fence %d: %w", v, err)
		}
	}
	return nil
}

// checkFenceInterrupt issues a FENCE with the interrupt flag and waits on
// the interrupt line for INT_STATUS.FENCE.
func checkFenceInterrupt(s *suite) error {
	d := s.d
	if err := s.sync(); err != nil {
		return err
	}
	// Clear stale causes first: MSI signals only a cause that becomes
	// pending.
	if _, err := d.ackInterrupts(); err != nil {
		return err
	}
	v := d.FenceAt(abi.FenceInterrupt|abi.FenceWriteMem, s.base+scrFence+64)
	RefFenceWrite(s.ref, scrFence+64, v)
	if err := d.Flush(); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(s.ctx, 10*time.Second)
	defer cancel()
	for {
		err := d.bus.WaitIRQ(ctx)
		if errors.Is(err, ErrNoIRQ) {
			if err := d.Wait(s.ctx, v); err != nil {
				return err
			}
			return errSkip{"bus cannot deliver interrupts"}
		}
		if err != nil {
			return fmt.Errorf("no interrupt for fence %d: %w", v, err)
		}
		st, err := d.ackInterrupts()
		if err != nil {
			return err
		}
		if st&abi.IntFence == 0 {
			continue // a stale wake-up; wait for ours
		}
		done, err := d.bus.ReadReg64(abi.RegFenceDone)
		if err != nil {
			return err
		}
		if done < v {
			return fmt.Errorf("INT_STATUS.FENCE with FENCE_DONE %d below fence %d", done, v)
		}
		if err := s.expect(scrFence+64, 8); err != nil {
			return err
		}
		return d.Wait(s.ctx, v)
	}
}

func checkCmdsDone(s *suite) error {
	if err := s.sync(); err != nil {
		return err
	}
	before, err := s.d.bus.ReadReg64(abi.RegCmdsDone)
	if err != nil {
		return err
	}
	for _, size := range []uint32{8, 64, 256} {
		if err := s.d.put(AppendNop(s.d.buf[:0], size)); err != nil {
			return err
		}
	}
	if err := s.sync(); err != nil {
		return err
	}
	after, err := s.d.bus.ReadReg64(abi.RegCmdsDone)
	if err != nil {
		return err
	}
	if after-before != 4 {
		return fmt.Errorf("CMDS_DONE went from %d to %d for 3 NOPs and a fence", before, after)
	}
	return nil
}

// checkRingWrap submits three rings' worth of commands without waiting, so
// the driver wraps and waits for ring space, with commands straddling the
// end of the ring.
func checkRingWrap(s *suite) error {
	d := s.d
	if err := s.sync(); err != nil {
		return err
	}
	total := 3 * uint64(d.ringSize)
	var wraps, straddles int
	var sent uint64
	// Put the tail 16 bytes off a 32-byte boundary so that 32-byte FILLs
	// straddle the end of the ring.
	if pad := (16 - d.tail%32) % 32; pad != 0 {
		if err := d.put(AppendNop(d.buf[:0], pad)); err != nil {
			return err
		}
	}
	for i := uint32(0); sent < total; i++ {
		var cmd []byte
		off := uint64(i%(scrWrapLen/4)) * 4
		pat := i * 0x9e3779b9
		if i%97 == 0 {
			cmd = AppendNop(d.buf[:0], 256)
		} else {
			cmd = AppendFill(d.buf[:0], s.base+scrWrap+off, 4, pat)
			RefFill(s.ref, scrWrap+off, 4, pat)
		}
		before := d.tail
		if err := d.put(cmd); err != nil {
			return err
		}
		if d.tail < before {
			wraps++
			if d.tail != 0 {
				straddles++
			}
		}
		sent += uint64(len(cmd))
	}
	if err := s.sync(); err != nil {
		return err
	}
	if wraps < 2 || straddles < 1 {
		return fmt.Errorf("%d wraps, %d straddling commands: the check did not exercise wrap-around", wraps, straddles)
	}
	return s.expect(scrWrap, scrWrapLen)
}

// checkRecovery checks, after the refusals, that the device still runs
// commands and that the whole scratch area matches the model.
func checkRecovery(s *suite) error {
	if err := s.d.Fill(s.base+scrGeneral, 8<<10, 0xfeedf00d); err != nil {
		return err
	}
	RefFill(s.ref, scrGeneral, 8<<10, 0xfeedf00d)
	if err := s.d.Copy(s.base+scrGeneral+8<<10, s.base+scrGeneral, 8<<10); err != nil {
		return err
	}
	RefCopy(s.ref, scrGeneral+8<<10, scrGeneral, 8<<10)
	if err := s.sync(); err != nil {
		return err
	}
	if st, err := s.d.bus.ReadReg32(abi.RegErrStatus); err != nil || st != 0 {
		return fmt.Errorf("ERR_STATUS %#x (%v) after a clean batch", st, err)
	}
	return s.expectAll()
}

func le64(b []byte) uint64 { return binary.LittleEndian.Uint64(b) }
