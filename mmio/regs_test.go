package mmio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/engine"
)

// fakeEngine records what the register file asks of the engine.
type fakeEngine struct {
	regs      engine.Regs
	doorbells []uint32
}

func (e *fakeEngine) Regs() engine.Regs              { return e.regs }
func (e *fakeEngine) Stream(uint32) (uint32, uint64) { return 0, 0 }
func (e *fakeEngine) ClearStreamError(uint32)        {}
func (e *fakeEngine) SetRingBase(ga uint64)          { e.regs.RingBase = ga }
func (e *fakeEngine) SetRingSize(n uint32)           { e.regs.RingSize = n }
func (e *fakeEngine) SetEnabled(on bool) error {
	if on && e.regs.RingSize == 0 {
		return errors.New("bad ring")
	}
	e.regs.Enabled = on
	return nil
}
func (e *fakeEngine) Doorbell(tail uint32) error {
	if !e.regs.Enabled {
		return errors.New("disabled")
	}
	e.doorbells = append(e.doorbells, tail)
	return nil
}

// fakeGTT refuses entries with bit 63 set.
type fakeGTT struct{ e []uint64 }

func (g *fakeGTT) Entries() uint32 { return uint32(len(g.e)) }
func (g *fakeGTT) Read(i uint32) (uint64, error) {
	if int(i) >= len(g.e) {
		return 0, errors.New("index")
	}
	return g.e[i], nil
}
func (g *fakeGTT) Write(i uint32, v uint64) error {
	if int(i) >= len(g.e) || v>>63 != 0 {
		return errors.New("refused")
	}
	g.e[i] = v
	return nil
}

type harness struct {
	f       *RegisterFile
	eng     *fakeEngine
	gtt     *fakeGTT
	rising  []uint32
	pending uint32
	resets  int
	beats   []uint64
}

func newHarness() *harness {
	h := &harness{eng: &fakeEngine{}, gtt: &fakeGTT{e: make([]uint64, 16)}}
	h.f = New(Config{
		MemSize: 1 << 24, Engine: h.eng, GTT: h.gtt,
		Notify: func(p, r uint32) {
			h.pending = p
			if r != 0 {
				h.rising = append(h.rising, r)
			}
		},
		Reset:     func() { h.resets++ },
		Heartbeat: func(v uint64) { h.beats = append(h.beats, v) },
	})
	return h
}

func (h *harness) r32(t *testing.T, off uint64) uint32 {
	t.Helper()
	var b [4]byte
	if err := h.f.Read(off, b[:]); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint32(b[:])
}

func (h *harness) r64(t *testing.T, off uint64) uint64 {
	t.Helper()
	var b [8]byte
	if err := h.f.Read(off, b[:]); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint64(b[:])
}

func (h *harness) w32(t *testing.T, off uint64, v uint32) {
	t.Helper()
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	if err := h.f.Write(off, b[:]); err != nil {
		t.Fatal(err)
	}
}

func (h *harness) w64(t *testing.T, off uint64, v uint64) {
	t.Helper()
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], v)
	if err := h.f.Write(off, b[:]); err != nil {
		t.Fatal(err)
	}
}

func TestIdentityRegisters(t *testing.T) {
	h := newHarness()
	for _, c := range []struct {
		off  uint64
		want uint32
	}{
		{abi.RegID, abi.IDMagic}, {abi.RegVersion, abi.Version},
		{abi.RegGTTEntries, 16}, {abi.RegGTTOffset, abi.GTTOffset},
		{abi.RegMemSize, 1 << 24}, {abi.RegMemSize + 4, 0}, {0x0ffc, 0},
	} {
		if got := h.r32(t, c.off); got != c.want {
			t.Errorf("reg %#x = %#x, want %#x", c.off, got, c.want)
		}
	}
	if got := h.r64(t, abi.RegMemSize); got != 1<<24 {
		t.Errorf("MEM_SIZE as 64-bit = %#x", got)
	}
	h.w32(t, abi.RegID, 0) // read-only: ignored
	if got := h.r32(t, abi.RegID); got != abi.IDMagic {
		t.Errorf("ID changed by a write: %#x", got)
	}
}

func TestRingBaseHalvesAndWide(t *testing.T) {
	h := newHarness()
	h.w32(t, abi.RegRingBase, 0x1000)
	h.w32(t, abi.RegRingBase+4, 0x2)
	if got := h.eng.regs.RingBase; got != 0x2_0000_1000 {
		t.Fatalf("ring base from halves = %#x", got)
	}
	h.w64(t, abi.RegRingBase, 0x3000)
	if got := h.r64(t, abi.RegRingBase); got != 0x3000 {
		t.Fatalf("ring base wide = %#x", got)
	}
	if got := h.r32(t, abi.RegRingBase+4); got != 0 {
		t.Fatalf("high half = %#x", got)
	}
}

func TestDoorbellAndControlErrors(t *testing.T) {
	h := newHarness()
	h.w32(t, abi.RegIntMask, abi.IntError|abi.IntFence)
	h.w32(t, abi.RegDoorbell, 8) // ring disabled
	if got := h.r32(t, abi.RegErrStatus); got != abi.ErrDoorbell {
		t.Fatalf("ERR_STATUS after doorbell on disabled ring = %#x", got)
	}
	if h.pending != abi.IntError || len(h.rising) != 1 {
		t.Fatalf("pending %#x rising %v, want one ERROR edge", h.pending, h.rising)
	}
	h.w32(t, abi.RegControl, abi.ControlEnable) // ring size 0: refused
	if got := h.r32(t, abi.RegErrStatus); got != abi.ErrDoorbell|abi.ErrRing {
		t.Fatalf("ERR_STATUS = %#x, want DOORBELL|RING", got)
	}
	h.w32(t, abi.RegErrStatus, abi.ErrDoorbell) // rw1c
	if got := h.r32(t, abi.RegErrStatus); got != abi.ErrRing {
		t.Fatalf("ERR_STATUS after clearing DOORBELL = %#x", got)
	}
	h.w32(t, abi.RegRingSize, 4096)
	h.w32(t, abi.RegControl, abi.ControlEnable)
	if got := h.r32(t, abi.RegStatus); got&abi.StatusEnabled == 0 {
		t.Fatalf("STATUS = %#x, want enabled", got)
	}
	h.w32(t, abi.RegDoorbell, 64)
	if len(h.eng.doorbells) != 1 || h.eng.doorbells[0] != 64 {
		t.Fatalf("doorbells = %v", h.eng.doorbells)
	}
	h.w32(t, abi.RegControl, abi.ControlReset)
	if h.resets != 1 {
		t.Fatalf("resets = %d", h.resets)
	}
}

func TestInterruptStatusMask(t *testing.T) {
	h := newHarness()
	var seen [][2]uint32
	h.f.cfg.Interrupts = func(s, m uint32) { seen = append(seen, [2]uint32{s, m}) }
	defer func() {
		want := [][2]uint32{{abi.IntFence, 0}, {abi.IntFence, abi.IntFence}, {0, abi.IntFence}}
		if fmt.Sprint(seen) != fmt.Sprint(want) {
			t.Errorf("interrupt-state changes %v, want %v", seen, want)
		}
	}()
	h.f.Raise(abi.IntFence)
	if h.pending != 0 || len(h.rising) != 0 {
		t.Fatalf("masked cause delivered: pending %#x rising %v", h.pending, h.rising)
	}
	h.w32(t, abi.RegIntMask, abi.IntFence) // unmasking a pending cause raises the line
	if h.pending != abi.IntFence || len(h.rising) != 1 {
		t.Fatalf("after unmask: pending %#x rising %v", h.pending, h.rising)
	}
	h.w32(t, abi.RegIntStatus, abi.IntFence)
	if h.pending != 0 || h.r32(t, abi.RegIntStatus) != 0 {
		t.Fatalf("after ack: pending %#x", h.pending)
	}
}

func TestGTTWindow(t *testing.T) {
	h := newHarness()
	h.w64(t, abi.GTTOffset+8*3, 0x5003)
	if got := h.gtt.e[3]; got != 0x5003 {
		t.Fatalf("entry 3 = %#x", got)
	}
	h.w32(t, abi.GTTOffset+8*3+4, 0x1)
	if got := h.r64(t, abi.GTTOffset+8*3); got != 0x1_0000_5003 {
		t.Fatalf("entry 3 after high-half write = %#x", got)
	}
	// A bulk write of several entries, one refused.
	var b [24]byte
	binary.LittleEndian.PutUint64(b[0:], 0x1001)
	binary.LittleEndian.PutUint64(b[8:], 1<<63)
	binary.LittleEndian.PutUint64(b[16:], 0x2001)
	if err := h.f.Write(abi.GTTOffset+8*4, b[:]); err != nil {
		t.Fatal(err)
	}
	if h.gtt.e[4] != 0x1001 || h.gtt.e[5] != 0 || h.gtt.e[6] != 0x2001 {
		t.Fatalf("entries 4-6 = %#x", h.gtt.e[4:7])
	}
	if got := h.r32(t, abi.RegErrStatus); got != abi.ErrGTTEntry {
		t.Fatalf("ERR_STATUS = %#x, want GTT_ENTRY", got)
	}
	if got := h.r32(t, abi.RegErrGTTIndex); got != 5 {
		t.Fatalf("ERR_GTT_INDEX = %d, want 5", got)
	}
	// Beyond GTT_ENTRIES.
	h.w64(t, abi.GTTOffset+8*16, 0x1001)
	if got := h.r32(t, abi.RegErrStatus); got&abi.ErrMMIO == 0 {
		t.Fatalf("write past GTT_ENTRIES: ERR_STATUS = %#x", got)
	}
}

func TestBadAccess(t *testing.T) {
	h := newHarness()
	p := []byte{0, 0}
	if err := h.f.Read(abi.RegID, p); err != nil {
		t.Fatal(err)
	}
	if p[0] != 0xff || p[1] != 0xff {
		t.Fatalf("2-byte read = %x, want all ones", p)
	}
	if got := h.r32(t, abi.RegErrStatus); got != abi.ErrMMIO {
		t.Fatalf("ERR_STATUS = %#x", got)
	}
	if err := h.f.Write(abi.RegScratch+2, []byte{1, 2, 3, 4}); err != nil {
		t.Fatal(err)
	}
	if got := h.r32(t, abi.RegScratch); got != 0 {
		t.Fatalf("misaligned write landed: %#x", got)
	}
}

func TestHeartbeatAndSaveRestore(t *testing.T) {
	h := newHarness()
	h.w64(t, abi.RegHeartbeat, 41)
	h.w64(t, abi.RegHeartbeat, 42)
	if len(h.beats) != 2 || h.beats[1] != 42 {
		t.Fatalf("heartbeats = %v", h.beats)
	}
	h.w32(t, abi.RegScratch, 7)
	h.w32(t, abi.RegIntMask, abi.IntFence)
	h.f.Raise(abi.IntFence)
	s := h.f.Save()

	g := newHarness()
	g.f.Restore(s)
	if g.f.Save() != s {
		t.Fatalf("restored %+v, want %+v", g.f.Save(), s)
	}
	if g.pending != abi.IntFence {
		t.Fatalf("restore did not re-assert the pending interrupt: %#x", g.pending)
	}
	g.f.Reset()
	if g.f.Save() != (State{}) || g.pending != 0 {
		t.Fatalf("reset left %+v pending %#x", g.f.Save(), g.pending)
	}
}
