package vgpu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"reflect"
	"testing"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/vfio"
)

func newPool(t *testing.T, size uint64) *pool.Pool {
	t.Helper()
	p, err := pool.New(size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func newVGPU(t *testing.T, p *pool.Pool, name string, mem uint64) *VGPU {
	t.Helper()
	v, err := New(Config{Name: name, MemSize: mem, GTTEntries: 1024}, p, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}

func put32(v uint32) []byte { b := make([]byte, 4); binary.LittleEndian.PutUint32(b, v); return b }
func put64(v uint64) []byte { b := make([]byte, 8); binary.LittleEndian.PutUint64(b, v); return b }

func read32(t *testing.T, v *VGPU, region uint32, off uint64) uint32 {
	t.Helper()
	b := make([]byte, 4)
	if err := v.ReadRegion(region, off, b); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint32(b)
}

func write(t *testing.T, v *VGPU, region uint32, off uint64, b []byte) {
	t.Helper()
	if err := v.WriteRegion(region, off, b); err != nil {
		t.Fatal(err)
	}
}

func TestConfigDefaultsAndRefusals(t *testing.T) {
	p := newPool(t, 8<<20)
	for _, c := range []Config{{Name: "x", MemSize: 3 << 20}, {Name: "x", MemSize: 4096}, {Name: "x", MemSize: 1 << 20, GTTEntries: abi.GTTMaxEntries + 1}} {
		if _, err := New(c, p, zerolog.Nop()); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", c, err)
		}
	}
	if _, err := New(Config{Name: "big", MemSize: 16 << 20}, p, zerolog.Nop()); err == nil {
		t.Error("a vGPU larger than the pool was created")
	}
	if len(p.Partitions()) != 0 {
		t.Errorf("failed creations left partitions %v", p.Partitions())
	}
}

func TestRegionsAndIdentity(t *testing.T) {
	p := newPool(t, 8<<20)
	_ = newVGPU(t, p, "first", 1<<20) // so the second one is not at offset 0
	v := newVGPU(t, p, "second", 2<<20)

	ri, err := v.RegionInfo(abi.BARAperture)
	if err != nil {
		t.Fatal(err)
	}
	// The aperture is the partition's own memfd at offset 0, whatever the
	// partition's pool offset.
	if ri.File == nil || ri.Offset != 0 || v.Partition().Offset == 0 || ri.Size != 2<<20 || ri.Flags&vfio.RegionFlagMmap == 0 {
		t.Fatalf("aperture region %+v, partition %+v", ri, v.Partition())
	}
	if fi, err := ri.File.Stat(); err != nil || fi.Size() != 2<<20 {
		t.Fatalf("aperture memfd: %v, %v; want %d bytes", fi, err, 2<<20)
	}
	if ri, _ := v.RegionInfo(abi.BARRegs); ri.Size != abi.BAR0Size || ri.File != nil {
		t.Fatalf("BAR0 region %+v", ri)
	}
	if ri, _ := v.RegionInfo(1); ri.Size != 0 {
		t.Fatalf("BAR1 should be absent: %+v", ri)
	}
	if _, err := v.RegionInfo(vfio.PCINumRegions); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("region past the end: %v", err)
	}
	if got := read32(t, v, vfio.PCIConfigRegionIndex, 0); got != abi.PCIDeviceID<<16|abi.PCIVendorID {
		t.Fatalf("config vendor/device = %#x", got)
	}
	if got := read32(t, v, abi.BARRegs, abi.RegID); got != abi.IDMagic {
		t.Fatalf("ID = %#x", got)
	}
	if err := v.ReadRegion(abi.BARRegs, abi.BAR0Size-2, make([]byte, 4)); !errors.Is(err, unix.EINVAL) {
		t.Fatalf("read across the end of BAR0: %v", err)
	}
	// Aperture accesses through the trapped path land in the partition.
	write(t, v, abi.BARAperture, 4096, []byte{1, 2, 3})
	if m := p.Mem()[v.Partition().Offset+4096:]; m[0] != 1 || m[2] != 3 {
		t.Fatalf("aperture write not in the partition: %v", m[:3])
	}
}

// TestGTTOutOfPartitionRefused checks that a guest cannot point its GTT at
// another vGPU's memory: the entry is refused and flagged.
func TestGTTOutOfPartitionRefused(t *testing.T) {
	p := newPool(t, 8<<20)
	v := newVGPU(t, p, "a", 1<<20)
	_ = newVGPU(t, p, "b", 1<<20)
	pages := uint64(1<<20) / abi.PageSize
	write(t, v, abi.BARRegs, abi.RegIntMask, put32(abi.IntError))
	write(t, v, abi.BARRegs, abi.GTTOffset+8*7, put64(pages<<abi.PageShift|abi.GTTValid|abi.GTTWritable))
	if got := read32(t, v, abi.BARRegs, abi.RegErrStatus); got != abi.ErrGTTEntry {
		t.Fatalf("ERR_STATUS = %#x, want GTT_ENTRY", got)
	}
	if got := read32(t, v, abi.BARRegs, abi.RegErrGTTIndex); got != 7 {
		t.Fatalf("ERR_GTT_INDEX = %d", got)
	}
	if got := read32(t, v, abi.BARRegs, abi.GTTOffset+8*7); got != 0 {
		t.Fatalf("refused entry was stored: %#x", got)
	}
	if got := read32(t, v, abi.BARRegs, abi.RegIntStatus); got&abi.IntError == 0 {
		t.Fatalf("INT_STATUS = %#x, want ERROR", got)
	}
}

// program gives v some state in every part: config writes, GTT entries,
// register values.
func program(t *testing.T, v *VGPU) {
	t.Helper()
	write(t, v, vfio.PCIConfigRegionIndex, 0x10, put32(0xfe000000))
	write(t, v, vfio.PCIConfigRegionIndex, 0x04, []byte{0x06, 0x00})
	for i := uint64(0); i < 16; i++ {
		write(t, v, abi.BARRegs, abi.GTTOffset+8*i, put64((15-i)<<abi.PageShift|abi.GTTValid|abi.GTTWritable))
	}
	write(t, v, abi.BARRegs, abi.RegScratch, put32(0xabcd))
	write(t, v, abi.BARRegs, abi.RegIntMask, put32(abi.IntFence))
	write(t, v, abi.BARRegs, abi.RegRingBase, put64(0x8000))
	write(t, v, abi.BARRegs, abi.RegRingSize, put32(4096))
	write(t, v, abi.BARRegs, abi.RegControl, put32(abi.ControlEnable))
}

func TestSaveRestoreRoundTripRemaps(t *testing.T) {
	p := newPool(t, 16<<20)
	src := newVGPU(t, p, "src", 1<<20)
	program(t, src)
	src.Quiesce()
	s, err := src.Save()
	src.Resume()
	if err != nil {
		t.Fatal(err)
	}

	_ = newVGPU(t, p, "filler", 2<<20) // pushes the destination to another offset
	dst := newVGPU(t, p, "dst", 1<<20)
	dst.Quiesce()
	if err := dst.Restore(s); err != nil {
		t.Fatal(err)
	}
	if dst.Partition().Offset == src.Partition().Offset {
		t.Fatal("test needs the destination at a different pool offset")
	}
	got, err := dst.Save()
	if err != nil {
		t.Fatal(err)
	}
	dst.Resume()
	if !reflect.DeepEqual(got, s) {
		t.Fatalf("restored state differs:\n got %+v\nwant %+v", got, s)
	}
	// The guest's view is the same; the host backing moved with the partition.
	if a, b := read32(t, src, abi.BARRegs, abi.GTTOffset+8*3), read32(t, dst, abi.BARRegs, abi.GTTOffset+8*3); a != b {
		t.Fatalf("guest GTT entry differs: %#x vs %#x", a, b)
	}
	xs, err := dst.gtt.Resolve(3*abi.PageSize, 16, false)
	if err != nil {
		t.Fatal(err)
	}
	if want := dst.Partition().Offset + 12*abi.PageSize; len(xs) != 1 || xs[0].Off != want {
		t.Fatalf("resolved %+v, want one extent at %#x", xs, want)
	}
	if got := read32(t, dst, abi.BARRegs, abi.RegScratch); got != 0xabcd {
		t.Fatalf("scratch = %#x", got)
	}
}

func TestRestoreRefusesMismatch(t *testing.T) {
	p := newPool(t, 16<<20)
	v := newVGPU(t, p, "v", 1<<20)
	program(t, v)
	v.Quiesce()
	defer v.Resume()
	good, err := v.Save()
	if err != nil {
		t.Fatal(err)
	}
	bad := []func(*State){
		func(s *State) { s.Version = 99 },
		func(s *State) { s.Version = 1 },
		func(s *State) { s.Spec.MemSize = 2 << 20 },
		func(s *State) { s.Spec.Backend = BackendCUDA },
		func(s *State) { s.Spec.Caps |= abi.CapModules },
		func(s *State) { s.GTT.Entries = s.GTT.Entries[:3] },
		func(s *State) {
			s.GTT.Entries = append([]uint64(nil), s.GTT.Entries...)
			s.GTT.Entries[5] = (1<<20)<<abi.PageShift | abi.GTTValid
		},
	}
	for i, corrupt := range bad {
		s := good
		corrupt(&s)
		if err := v.Restore(s); !errors.Is(err, ErrState) {
			t.Errorf("corruption %d: Restore = %v, want ErrState", i, err)
		}
		if after, _ := v.Save(); !reflect.DeepEqual(after, good) {
			t.Errorf("corruption %d: a refused restore changed the device", i)
		}
	}
}

func TestResetKeepsMemory(t *testing.T) {
	p := newPool(t, 4<<20)
	v := newVGPU(t, p, "v", 1<<20)
	program(t, v)
	v.Memory()[100] = 42
	write(t, v, abi.BARRegs, abi.RegControl, put32(abi.ControlReset))
	if got := read32(t, v, abi.BARRegs, abi.GTTOffset+8*2); got != 0 {
		t.Fatalf("GTT entry after reset = %#x", got)
	}
	if got := read32(t, v, abi.BARRegs, abi.RegStatus); got&abi.StatusEnabled != 0 {
		t.Fatalf("ring still enabled after reset")
	}
	if got := read32(t, v, vfio.PCIConfigRegionIndex, 0x10); got&^0xf != 0xfe000000 {
		t.Fatalf("CONTROL.RESET cleared config space BAR0: %#x", got)
	}
	if v.Memory()[100] != 42 {
		t.Fatal("reset cleared graphics memory")
	}
	if err := v.Reset(); err != nil {
		t.Fatal(err)
	}
	if got := read32(t, v, vfio.PCIConfigRegionIndex, 0x10); got&^0xf != 0 {
		t.Fatalf("function reset kept BAR0 = %#x", got)
	}
}

func TestCloseFreesPartition(t *testing.T) {
	p := newPool(t, 2<<20)
	v, err := New(Config{Name: "v", MemSize: 2 << 20}, p, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	v.Memory()[0] = 1
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	w := newVGPU(t, p, "w", 2<<20)
	if w.Memory()[0] != 0 {
		t.Fatal("a new vGPU saw the previous tenant's memory")
	}
}

// TestObserveWrites drives one FILL through the ring and checks the
// observer sees exactly the partition range it wrote.
func TestObserveWrites(t *testing.T) {
	p := newPool(t, 8<<20)
	_ = newVGPU(t, p, "pad", 1<<20)
	v := newVGPU(t, p, "v", 1<<20)
	type rng struct{ off, n uint64 }
	got := make(chan rng, 16)
	if err := v.ObserveWrites(func(off, n uint64) { got <- rng{off, n} }); err != nil {
		t.Fatal(err)
	}
	if err := v.ObserveWrites(func(off, n uint64) {}); !errors.Is(err, ErrObserved) {
		t.Fatalf("a second observer: %v, want ErrObserved", err)
	}
	// GTT: graphics page 0 -> aperture page 5 (the ring), graphics page 1 -> aperture page 9.
	write(t, v, abi.BARRegs, abi.GTTOffset, put64(5<<abi.PageShift|abi.GTTValid|abi.GTTWritable))
	write(t, v, abi.BARRegs, abi.GTTOffset+8, put64(9<<abi.PageShift|abi.GTTValid|abi.GTTWritable))
	write(t, v, abi.BARRegs, abi.RegRingBase, put64(0))
	write(t, v, abi.BARRegs, abi.RegRingSize, put32(abi.PageSize))
	write(t, v, abi.BARRegs, abi.RegControl, put32(abi.ControlEnable))
	cmd := abi.CmdFill{Header: abi.CmdHeader{Opcode: abi.OpFill, Size: abi.CmdFillSize}, Dst: abi.PageSize + 64, Len: 128, Pattern: 7}
	var b bytes.Buffer
	if err := binary.Write(&b, binary.LittleEndian, cmd); err != nil {
		t.Fatal(err)
	}
	copy(v.Memory()[5*abi.PageSize:], b.Bytes())
	write(t, v, abi.BARRegs, abi.RegDoorbell, put32(abi.CmdFillSize))
	if r := <-got; r != (rng{9*abi.PageSize + 64, 128}) {
		t.Fatalf("observed %+v, want the FILL's range in aperture page 9", r)
	}
	if v.Memory()[9*abi.PageSize+64] != 7 {
		t.Fatal("the FILL did not land")
	}
}

// TestObserveTrappedApertureWrites: a guest store that reaches gmigd as a
// region write (QEMU traps the BAR while INTx is pending) is reported like
// the engine's, after it landed: no write log of QEMU's mapping sees it.
func TestObserveTrappedApertureWrites(t *testing.T) {
	p := newPool(t, 4<<20)
	v := newVGPU(t, p, "v", 1<<20)
	var got [][2]uint64
	if err := v.ObserveWrites(func(off, n uint64) {
		if v.Memory()[off] != 0xab {
			t.Error("reported before the store landed")
		}
		got = append(got, [2]uint64{off, n})
	}); err != nil {
		t.Fatal(err)
	}
	write(t, v, abi.BARAperture, 3*abi.PageSize+17, []byte{0xab, 0xab})
	if len(got) != 1 || got[0] != [2]uint64{3*abi.PageSize + 17, 2} {
		t.Fatalf("observed %v, want the store's range", got)
	}
}
