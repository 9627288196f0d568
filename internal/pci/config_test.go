package pci

import (
	"encoding/binary"
	"errors"
	"slices"
	"sync"
	"testing"

	"github.com/gmig-dev/gmig/abi"
)

// The gmig vGPU's function (docs/device-abi.md §2): BAR0 32-bit 1 MiB,
// BAR2+3 64-bit prefetchable aperture, MSI.
var gmigID = Identity{
	VendorID: abi.PCIVendorID, DeviceID: abi.PCIDeviceID,
	SubVendorID: abi.PCISubVendorID, SubDeviceID: abi.PCISubDeviceID,
	Revision: abi.PCIRevision, ClassCode: abi.PCIClassCode, InterruptPin: abi.PCIInterruptPin,
}

const apertureSize = 64 << 20

func gmigBARs(aperture uint64) [NumBARs]BAR {
	var b [NumBARs]BAR
	b[abi.BARRegs] = BAR{Size: abi.BAR0Size}
	b[abi.BARAperture] = BAR{Size: aperture, Mem64: true, Prefetchable: true}
	return b
}

func newGmig(t testing.TB) *Config {
	t.Helper()
	c, err := New(gmigID, gmigBARs(apertureSize), true)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func r8(t testing.TB, c *Config, off uint64) uint8 {
	t.Helper()
	var b [1]byte
	if err := c.Read(off, b[:]); err != nil {
		t.Fatal(err)
	}
	return b[0]
}

func r16(t testing.TB, c *Config, off uint64) uint16 {
	t.Helper()
	var b [2]byte
	if err := c.Read(off, b[:]); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint16(b[:])
}

func r32(t testing.TB, c *Config, off uint64) uint32 {
	t.Helper()
	var b [4]byte
	if err := c.Read(off, b[:]); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint32(b[:])
}

func w8(t testing.TB, c *Config, off uint64, v uint8) {
	t.Helper()
	if err := c.Write(off, []byte{v}); err != nil {
		t.Fatal(err)
	}
}

func w16(t testing.TB, c *Config, off uint64, v uint16) {
	t.Helper()
	if err := c.Write(off, binary.LittleEndian.AppendUint16(nil, v)); err != nil {
		t.Fatal(err)
	}
}

func w32(t testing.TB, c *Config, off uint64, v uint32) {
	t.Helper()
	if err := c.Write(off, binary.LittleEndian.AppendUint32(nil, v)); err != nil {
		t.Fatal(err)
	}
}

func TestIdentityBytes(t *testing.T) {
	c := newGmig(t)
	want := map[uint64]uint32{ // offset -> expected bytes (little-endian), by width below
		0x00: 0x676d1234, // device:vendor
		0x04: 0x00100000, // status cap list : command 0
		0x08: 0x03020001, // class 03 02 00, revision 01
		0x0c: 0x00000000, // header type 0, single function
		0x10: 0x00000000, // BAR0: 32-bit memory
		0x14: 0x00000000, // BAR1 absent
		0x18: 0x0000000c, // BAR2: 64-bit prefetchable
		0x1c: 0x00000000, // BAR3: high half
		0x20: 0x00000000,
		0x24: 0x00000000,
		0x2c: 0x00011234, // subsystem 1234:0001
		0x30: 0x00000000, // no ROM
		0x34: 0x00000050, // cap pointer
		0x3c: 0x00000100, // pin A, line 0
		0x50: 0x00800005, // MSI, last, 64-bit, 1 vector, disabled
	}
	for off, v := range want {
		if got := r32(t, c, off); got != v {
			t.Errorf("dword %#x = %#08x, want %#08x", off, got, v)
		}
	}
	var all [Size]byte
	if err := c.Read(0, all[:]); err != nil {
		t.Fatal(err)
	}
	for off := 0x54; off < Size; off++ {
		if all[off] != 0 {
			t.Errorf("byte %#x = %#x, want 0", off, all[off])
		}
	}
}

func TestNewRejects(t *testing.T) {
	good := gmigBARs(apertureSize)
	withBAR := func(i int, b BAR) [NumBARs]BAR {
		bars := good
		bars[i] = b
		return bars
	}
	for _, tc := range []struct {
		name string
		id   Identity
		bars [NumBARs]BAR
		want error
	}{
		{"class code too wide", Identity{ClassCode: 1 << 24}, good, ErrIdentity},
		{"pin 5", Identity{InterruptPin: 5}, good, ErrIdentity},
		{"size not power of two", gmigID, withBAR(0, BAR{Size: 3 << 12}), ErrBAR},
		{"size below 16", gmigID, withBAR(0, BAR{Size: 8}), ErrBAR},
		{"32-bit 4 GiB", gmigID, withBAR(0, BAR{Size: 1 << 32}), ErrBAR},
		{"64-bit last", gmigID, withBAR(5, BAR{Size: 4096, Mem64: true}), ErrBAR},
		{"64-bit upper half taken", gmigID, withBAR(3, BAR{Size: 4096}), ErrBAR},
		{"absent with flags", gmigID, withBAR(1, BAR{Prefetchable: true}), ErrBAR},
		{"64-bit into 64-bit", gmigID, withBAR(1, BAR{Size: 4096, Mem64: true}), ErrBAR},
	} {
		if _, err := New(tc.id, tc.bars, true); !errors.Is(err, tc.want) {
			t.Errorf("%s: New = %v, want %v", tc.name, err, tc.want)
		}
	}
	ok := [NumBARs]BAR{{Size: 16}, {Size: 1 << 31}, {Size: 1 << 40, Mem64: true}, {}, {Size: 1 << 63, Mem64: true}}
	if _, err := New(gmigID, ok, false); err != nil {
		t.Errorf("extreme but valid BARs refused: %v", err)
	}
}

// probe sizes BAR register off the way firmware does: save, write all ones,
// read back, restore.
func probe(t *testing.T, c *Config, off uint64) uint32 {
	t.Helper()
	saved := r32(t, c, off)
	w32(t, c, off, 0xffffffff)
	got := r32(t, c, off)
	w32(t, c, off, saved)
	if after := r32(t, c, off); after != saved {
		t.Errorf("BAR %#x did not restore: %#x, want %#x", off, after, saved)
	}
	return got
}

func TestBARSizing32(t *testing.T) {
	c := newGmig(t)
	rb := probe(t, c, OffBAR0)
	if rb != 0xfff00000 {
		t.Fatalf("BAR0 probe reads %#08x, want 0xfff00000", rb)
	}
	if size := ^(rb &^ 0xf) + 1; size != abi.BAR0Size {
		t.Errorf("BAR0 sized as %#x", size)
	}
	// Program it; the bits below the size stay zero.
	w32(t, c, OffBAR0, 0xfeb12345)
	if got := r32(t, c, OffBAR0); got != 0xfeb00000 {
		t.Errorf("BAR0 = %#08x, want 0xfeb00000", got)
	}
	if got := c.BARAddress(0); got != 0xfeb00000 {
		t.Errorf("BARAddress(0) = %#x", got)
	}
	// Absent BARs read 0 whatever is written.
	for _, off := range []uint64{0x14, 0x20, 0x24, OffROM} {
		if rb := probe(t, c, off); rb != 0 {
			t.Errorf("absent BAR %#x probes as %#x", off, rb)
		}
	}
}

func TestBARSizing64(t *testing.T) {
	c := newGmig(t)
	lo, hi := probe(t, c, 0x18), probe(t, c, 0x1c)
	if lo != 0xfc00000c || hi != 0xffffffff {
		t.Fatalf("BAR2 probe reads %#08x:%#08x, want 0xffffffff:0xfc00000c", hi, lo)
	}
	if lo&0x6 != BARMem64 || lo&BARPrefetchable == 0 {
		t.Errorf("BAR2 type bits %#x", lo&0xf)
	}
	if size := ^(uint64(hi)<<32 | uint64(lo&^0xf)) + 1; size != apertureSize {
		t.Errorf("BAR2 sized as %#x", size)
	}
	w32(t, c, 0x18, 0xe0000000)
	w32(t, c, 0x1c, 0x00000038)
	if got := c.BARAddress(2); got != 0x38_e0000000 {
		t.Errorf("BARAddress(2) = %#x", got)
	}
	if got := c.BARAddress(3); got != 0 {
		t.Errorf("BARAddress(3) (upper half) = %#x", got)
	}

	// A BAR larger than 4 GiB: the low half has no address bits.
	var bars [NumBARs]BAR
	bars[0] = BAR{Size: 8 << 30, Mem64: true}
	big, err := New(gmigID, bars, false)
	if err != nil {
		t.Fatal(err)
	}
	if lo, hi := probe(t, big, 0x10), probe(t, big, 0x14); lo != 0x4 || hi != 0xfffffffe {
		t.Errorf("8 GiB BAR probes %#08x:%#08x, want 0xfffffffe:0x00000004", hi, lo)
	}
}

func TestReadOnlyBytesIgnoreWrites(t *testing.T) {
	c := newGmig(t)
	var before [Size]byte
	c.Read(0, before[:])
	ones := make([]byte, Size)
	for i := range ones {
		ones[i] = 0xff
	}
	if err := c.Write(0, ones); err != nil {
		t.Fatal(err)
	}
	var after [Size]byte
	c.Read(0, after[:])
	for off := range Size {
		if got, want := after[off], before[off]|c.wmask[off]; got != want {
			t.Errorf("byte %#x = %#02x after all-ones, want %#02x", off, got, want)
		}
	}
	// The writable set is exactly what docs/device-abi.md §2 lists.
	if got := c.Command(); got != 0x0407 {
		t.Errorf("command = %#04x, want 0x0407", got)
	}
	if got := r8(t, c, OffIntLine); got != 0xff {
		t.Errorf("interrupt line = %#x", got)
	}
	if got := r16(t, c, OffMSIControl); got != MSIControl64Bit|MSIControlEnable {
		t.Errorf("MSI control = %#x", got)
	}
	if got := r32(t, c, OffMSIAddrLo); got != 0xfffffffc {
		t.Errorf("MSI address low = %#x", got)
	}
	writable := 0
	for _, m := range c.wmask {
		if m != 0 {
			writable++
		}
	}
	// command 2, BAR0 2 (bits 20-31), BAR2 1 (bits 26-31), BAR3 4,
	// line 1, MSI control 1, address 4+4, data 2.
	if writable != 21 {
		t.Errorf("%d writable bytes, want 21", writable)
	}
}

func TestMultiRegisterWrite(t *testing.T) {
	c := newGmig(t)
	// One dword at 0x3c: line (rw), pin, min grant, max latency (ro).
	w32(t, c, OffIntLine, 0xffffff0b)
	if got := r32(t, c, OffIntLine); got != 0x0000010b {
		t.Errorf("dword 0x3c = %#08x, want 0x0000010b", got)
	}
	// One dword at 0x04: command (rw bits) and status (ro).
	w32(t, c, OffCommand, 0xffff0006)
	if got := r32(t, c, OffCommand); got != 0x00100006 {
		t.Errorf("dword 0x04 = %#08x, want 0x00100006", got)
	}
	// A misaligned write across BAR2 and BAR3.
	if err := c.Write(0x1a, []byte{0x00, 0xc0, 0x12, 0x00}); err != nil {
		t.Fatal(err)
	}
	if got := c.BARAddress(2); got != 0x12_c000_0000 {
		t.Errorf("BARAddress(2) = %#x", got)
	}
}

func TestCommandRegister(t *testing.T) {
	c := newGmig(t)
	w16(t, c, OffCommand, CommandMemory|CommandBusMaster|1<<8|1<<6)
	if got := c.Command(); got != CommandMemory|CommandBusMaster {
		t.Errorf("command = %#x", got)
	}
	if c.INTxDisabled() {
		t.Error("INTx disabled without the bit")
	}
	w16(t, c, OffCommand, CommandMemory|CommandINTxDisable)
	if !c.INTxDisabled() || c.Command() != CommandMemory|CommandINTxDisable {
		t.Errorf("command = %#x, INTx disabled %v", c.Command(), c.INTxDisabled())
	}
	w8(t, c, OffCommand+1, 0) // high byte alone
	if c.INTxDisabled() || c.Command() != CommandMemory {
		t.Errorf("byte write: command = %#x", c.Command())
	}
}

// walkCaps follows the capability list like a guest kernel, with a bound so
// a loop fails the test instead of hanging it.
func walkCaps(t *testing.T, c *Config) map[uint8]uint64 {
	found := map[uint8]uint64{}
	if r16(t, c, OffStatus)&StatusCapList == 0 {
		return found
	}
	ptr := uint64(r8(t, c, OffCapPtr))
	for steps := 0; ptr != 0; steps++ {
		if steps > 48 || ptr < 0x40 || ptr&3 != 0 {
			t.Fatalf("capability list broken at %#x after %d steps", ptr, steps)
		}
		found[r8(t, c, ptr)] = ptr
		ptr = uint64(r8(t, c, ptr+1))
	}
	return found
}

func TestCapabilityList(t *testing.T) {
	c := newGmig(t)
	if caps := walkCaps(t, c); len(caps) != 1 || caps[CapIDMSI] != MSIOffset {
		t.Errorf("capabilities %v, want MSI at %#x only", caps, MSIOffset)
	}
	plain, err := New(gmigID, gmigBARs(apertureSize), false)
	if err != nil {
		t.Fatal(err)
	}
	if caps := walkCaps(t, plain); len(caps) != 0 || r8(t, plain, OffCapPtr) != 0 {
		t.Errorf("capabilities without MSI: %v", caps)
	}
	w16(t, plain, OffMSIControl, MSIControlEnable)
	if plain.MSIEnabled() || r16(t, plain, OffMSIControl) != 0 {
		t.Error("MSI enabled on a function without the capability")
	}
	if a, d := plain.MSIMessage(); a != 0 || d != 0 {
		t.Errorf("MSIMessage without MSI = %#x, %#x", a, d)
	}
}

func TestMSI(t *testing.T) {
	c := newGmig(t)
	if c.MSIEnabled() {
		t.Fatal("MSI enabled at power-on")
	}
	w32(t, c, OffMSIAddrLo, 0xfee0100f) // bits 1:0 reserved
	w32(t, c, OffMSIAddrHi, 0x1)
	w16(t, c, OffMSIData, 0x4041)
	if addr, data := c.MSIMessage(); addr != 0x1_fee0100c || data != 0x4041 {
		t.Errorf("MSIMessage = %#x, %#x", addr, data)
	}
	w16(t, c, OffMSIControl, 0xfffe) // everything but enable: nothing changes
	if c.MSIEnabled() || r16(t, c, OffMSIControl) != MSIControl64Bit {
		t.Errorf("control = %#x", r16(t, c, OffMSIControl))
	}
	w16(t, c, OffMSIControl, MSIControlEnable|0x70) // multiple message enable stays 0
	if !c.MSIEnabled() || r16(t, c, OffMSIControl) != MSIControl64Bit|MSIControlEnable {
		t.Errorf("control = %#x, enabled %v", r16(t, c, OffMSIControl), c.MSIEnabled())
	}
	if r16(t, c, OffMSIData+2) != 0 {
		t.Error("extended message data writable")
	}
}

func TestAccessRange(t *testing.T) {
	c := newGmig(t)
	for _, tc := range []struct {
		off uint64
		n   int
	}{{0, 0}, {256, 1}, {255, 2}, {0, 257}, {1 << 63, 4}, {^uint64(0), 1}} {
		p := make([]byte, tc.n)
		if err := c.Read(tc.off, p); !errors.Is(err, ErrRange) {
			t.Errorf("Read(%#x, %d) = %v", tc.off, tc.n, err)
		}
		if err := c.Write(tc.off, p); !errors.Is(err, ErrRange) {
			t.Errorf("Write(%#x, %d) = %v", tc.off, tc.n, err)
		}
	}
	full := make([]byte, Size)
	if err := c.Read(0, full); err != nil {
		t.Errorf("256-byte read: %v", err)
	}
	if err := c.Read(255, full[:1]); err != nil {
		t.Errorf("last byte: %v", err)
	}
}

// firmware programs the device as SeaBIOS and a Linux guest do.
func firmware(t *testing.T, c *Config) {
	for _, off := range []uint64{0x10, 0x14, 0x18, 0x1c, 0x20, 0x24, OffROM} {
		probe(t, c, off)
	}
	w32(t, c, 0x10, 0xfea00000)
	w32(t, c, 0x18, 0xf8000000)
	w32(t, c, 0x1c, 0)
	w8(t, c, OffIntLine, 11)
	w16(t, c, OffCommand, CommandMemory)
	w32(t, c, OffMSIAddrLo, 0xfee00000)
	w32(t, c, OffMSIAddrHi, 0)
	w16(t, c, OffMSIData, 0x4022)
	w16(t, c, OffMSIControl, MSIControlEnable)
	w16(t, c, OffCommand, CommandMemory|CommandBusMaster|CommandINTxDisable)
	w32(t, c, 0x10, 0xfeb00000) // moved: a second write to BAR0
}

func TestWritesOrderAndCompaction(t *testing.T) {
	c := newGmig(t)
	if ws := c.Writes(); len(ws) != 0 {
		t.Fatalf("Writes at power-on = %v", ws)
	}
	firmware(t, c)
	want := []Write{
		{0x10, 4, 0xfeb00000},         // BAR0, last value only
		{0x18, 4, 0xf800000c},         // BAR2 low, with its type bits
		{OffIntLine, 1, 11},           // BAR3 = 0 is the power-on value: skipped
		{OffMSIAddrLo, 4, 0xfee00000}, // MSI address high = 0: skipped
		{OffMSIData, 2, 0x4022},
		{OffMSIControl, 2, MSIControl64Bit | MSIControlEnable},
		{OffCommand, 2, CommandMemory | CommandBusMaster | CommandINTxDisable},
	}
	if got := c.Writes(); !slices.Equal(got, want) {
		t.Errorf("Writes =\n%#v\nwant\n%#v", got, want)
	}

	// Replaying the list into a fresh Config reproduces every register a
	// guest can write.
	dst := newGmig(t)
	for _, w := range want {
		b := binary.LittleEndian.AppendUint32(nil, w.Value)[:w.Size]
		if err := dst.Write(uint64(w.Offset), b); err != nil {
			t.Fatal(err)
		}
	}
	var a, b [Size]byte
	c.Read(0, a[:])
	dst.Read(0, b[:])
	if a != b {
		t.Errorf("replayed space differs:\n%x\n%x", a, b)
	}

	// Writing a register back to its power-on value drops it.
	w32(t, c, OffMSIAddrLo, 0)
	for _, w := range c.Writes() {
		if w.Offset == OffMSIAddrLo {
			t.Errorf("MSI address back at 0 still listed: %v", w)
		}
	}
	// Read-only writes are not recorded.
	w32(t, c, OffVendorID, 0)
	w32(t, c, 0x14, 0xffffffff)
	w32(t, c, OffROM, 0xffffffff)
	for _, w := range c.Writes() {
		if w.Offset == OffVendorID || w.Offset == 0x14 || w.Offset == OffROM {
			t.Errorf("read-only register listed: %v", w)
		}
	}
}

func TestReset(t *testing.T) {
	c := newGmig(t)
	var power [Size]byte
	c.Read(0, power[:])
	firmware(t, c)
	c.Reset()
	var got [Size]byte
	c.Read(0, got[:])
	if got != power {
		t.Errorf("Reset space differs from power-on")
	}
	if c.MSIEnabled() || c.Command() != 0 || c.BARAddress(0) != 0 || len(c.Writes()) != 0 {
		t.Errorf("Reset left state: msi %v cmd %#x bar0 %#x writes %v", c.MSIEnabled(), c.Command(), c.BARAddress(0), c.Writes())
	}
}

func TestSaveRestoreRoundTrip(t *testing.T) {
	src := newGmig(t)
	firmware(t, src)
	s := src.Save()
	dst := newGmig(t)
	if err := dst.Restore(s); err != nil {
		t.Fatal(err)
	}
	if dst.Save() != s {
		t.Error("restored state differs")
	}
	if !slices.Equal(dst.Writes(), src.Writes()) {
		t.Errorf("Writes after Restore %v, want %v", dst.Writes(), src.Writes())
	}
	if a, d := dst.MSIMessage(); !dst.MSIEnabled() || a != 0xfee00000 || d != 0x4022 || dst.BARAddress(2) != 0xf8000000 {
		t.Errorf("restored MSI %#x/%#x enabled %v, BAR2 %#x", a, d, dst.MSIEnabled(), dst.BARAddress(2))
	}
	// A Save is a copy.
	w16(t, src, OffCommand, 0)
	if dst.Command() == 0 || s.Space[OffCommand] == 0 {
		t.Error("Save aliases the live space")
	}
}

func TestRestoreRefusesMismatch(t *testing.T) {
	src := newGmig(t)
	firmware(t, src)
	good := src.Save()
	otherID := gmigID
	otherID.DeviceID = 0x1111
	other, _ := New(otherID, gmigBARs(apertureSize), true)
	// A state from a vGPU with half the aperture, whose BAR2 sits at an
	// address this one cannot decode (bit 25 is read-only here).
	half, _ := New(gmigID, gmigBARs(apertureSize/2), true)
	w32(t, half, 0x18, 0xfa000000)
	halfState := half.Save()
	noMSI, _ := New(gmigID, gmigBARs(apertureSize), false)

	flipped := good
	flipped.Space[0x18] ^= BARPrefetchable
	roWritten := good
	roWritten.Written[OffVendorID] = true

	for _, tc := range []struct {
		name string
		c    *Config
		s    State
	}{
		{"other device ID", other, good},
		{"BAR2 address below this BAR's size", newGmig(t), halfState},
		{"no MSI capability", noMSI, good},
		{"BAR type bit flipped", newGmig(t), flipped},
		{"read-only byte marked written", newGmig(t), roWritten},
	} {
		before := tc.c.Save()
		if err := tc.c.Restore(tc.s); !errors.Is(err, ErrMismatch) {
			t.Errorf("%s: Restore = %v, want ErrMismatch", tc.name, err)
		}
		if tc.c.Save() != before {
			t.Errorf("%s: refused Restore changed the config", tc.name)
		}
	}
}

func TestConcurrentInterruptPath(t *testing.T) {
	c := newGmig(t)
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for i := range 2000 {
			for _, w := range []struct {
				off uint64
				b   []byte
			}{
				{OffMSIControl, []byte{byte(i & 1), 0}},
				{OffCommand, []byte{0, byte(i & 2 << 1)}},
				{OffMSIAddrLo, []byte{0, 0, 0xe0, 0xfe}},
			} {
				if err := c.Write(w.off, w.b); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	go func() {
		defer wg.Done()
		for range 2000 {
			if c.MSIEnabled() {
				if a, _ := c.MSIMessage(); a != 0xfee00000 && a != 0 {
					t.Errorf("torn MSI address %#x", a)
					return
				}
			}
			_ = c.INTxDisabled()
		}
	}()
	wg.Wait()
}

func TestInterruptStatusBit(t *testing.T) {
	c := newGmig(t)
	c.SetInterruptStatus(true)
	if r16(t, c, OffStatus)&StatusInterrupt == 0 {
		t.Fatal("interrupt status not reflected")
	}
	// The guest cannot clear it, and a state saved while it is set restores.
	if err := c.Write(OffStatus, []byte{0xff, 0xff}); err != nil {
		t.Fatal(err)
	}
	if r16(t, c, OffStatus)&StatusInterrupt == 0 {
		t.Fatal("guest write cleared the interrupt status bit")
	}
	s := c.Save()
	c.SetInterruptStatus(false)
	if r16(t, c, OffStatus)&StatusInterrupt != 0 {
		t.Fatal("interrupt status not cleared")
	}
	if err := newGmig(t).Restore(s); err != nil {
		t.Fatalf("restoring a state with INTx asserted: %v", err)
	}
}
