package vgpu

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/gtt"
)

// Device addresses (ABI 1.3): CAPS bit 6 and DEVICE_ADDR_BASE on vGPUs
// with device-local memory, kept across save and restore.

const devLocal = 1 << 20

// readReg64 reads a 64-bit register as the guest does.
func readReg64(t *testing.T, v *VGPU, off uint64) uint64 {
	t.Helper()
	var b [8]byte
	if err := v.ReadRegion(abi.BARRegs, off, b[:]); err != nil {
		t.Fatal(err)
	}
	return binary.LittleEndian.Uint64(b[:])
}

// TestDeviceAddrBase: a vGPU with local memory sets CAPS bit 6 and reads
// its back end's base in DEVICE_ADDR_BASE (the software back end's fixed
// value; the cuda back end's local allocation, 2 MiB aligned); one
// without has neither.
func TestDeviceAddrBase(t *testing.T) {
	useCUDA(t)
	p := newPool(t, 16<<20)
	for _, c := range []Config{
		{Name: "sw", MemSize: 1 << 20, LocalMemSize: devLocal},
		{Name: "cuda", MemSize: 1 << 20, LocalMemSize: devLocal, Backend: BackendCUDA},
		{Name: "plain", MemSize: 1 << 20},
	} {
		v, err := New(c, p, zerolog.Nop())
		if err != nil {
			t.Fatalf("%s: %v", c.Name, err)
		}
		caps, base := uint32(readReg64(t, v, abi.RegCaps)), readReg64(t, v, abi.RegDeviceAddrBase)
		want := uint64(0)
		switch {
		case c.Backend == BackendCUDA:
			want = v.GPU().DeviceAddrBase()
		case c.LocalMemSize > 0:
			want = engine.SoftwareDeviceAddrBase
		}
		if base != want || (caps&abi.CapDeviceAddr != 0) != (c.LocalMemSize > 0) || base%(2<<20) != 0 {
			t.Errorf("%s: CAPS %#x, DEVICE_ADDR_BASE %#x; want bit 6 %v and %#x, 2 MiB aligned", c.Name, caps, base, c.LocalMemSize > 0, want)
		}
		if c.LocalMemSize > 0 && want == 0 {
			t.Errorf("%s: no device address for local memory", c.Name)
		}
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestDeviceAddrRestore: the engine's state carries DEVICE_ADDR_BASE; a
// cuda vGPU restoring it where another vGPU of the same CUDA context
// (isolation "shared") holds that address refuses (ErrState wrapping
// nvidia.ErrDeviceAddr) and keeps its own, and once the address is free
// the restore moves local memory there, bytes intact. A state whose base
// differs from the software back end's fixed one is refused too
// (engine.ErrDeviceAddr).
func TestDeviceAddrRestore(t *testing.T) {
	useCUDA(t)
	p := newPool(t, 16<<20)
	cfg := Config{Name: "a", MemSize: 1 << 20, LocalMemSize: devLocal, Backend: BackendCUDA, GPUIsolation: IsolationShared}
	a, err := New(cfg, p, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Name = "b"
	b, err := New(cfg, p, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	a.Quiesce()
	b.Quiesce()
	st, err := a.Save()
	if err != nil {
		t.Fatal(err)
	}
	base := a.GPU().DeviceAddrBase()
	if st.Engine.DeviceAddrBase != base {
		t.Fatalf("saved DeviceAddrBase %#x, the back end's is %#x", st.Engine.DeviceAddrBase, base)
	}
	if err := a.Restore(st); err != nil {
		t.Fatalf("restoring a vGPU's own state: %v", err)
	}
	own := b.GPU().DeviceAddrBase()
	data := bytes.Repeat([]byte("local"), devLocal/5)
	local := []gtt.Extent{{Off: b.Partition().ApertureEnd(), Len: uint64(len(data))}}
	if err := b.GPU().Write(local, data); err != nil {
		t.Fatal(err)
	}
	err = b.Restore(st)
	if !errors.Is(err, ErrState) || !errors.Is(err, nvidia.ErrDeviceAddr) {
		t.Fatalf("restore at an address another vGPU holds: %v, want ErrState and nvidia.ErrDeviceAddr", err)
	}
	if b.GPU().DeviceAddrBase() != own || readReg64(t, b, abi.RegDeviceAddrBase) != own {
		t.Fatal("a refused restore moved local memory")
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(st); err != nil {
		t.Fatalf("restore once the address is free: %v", err)
	}
	if got := readReg64(t, b, abi.RegDeviceAddrBase); got != base {
		t.Fatalf("DEVICE_ADDR_BASE %#x after the restore, want the saved %#x", got, base)
	}
	got := make([]byte, len(data))
	if err := b.GPU().Read(got, local); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("local memory after the move: %v, or bytes differ", err)
	}

	sw, err := New(Config{Name: "sw", MemSize: 1 << 20, LocalMemSize: devLocal}, p, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer sw.Close()
	sw.Quiesce()
	st, err = sw.Save()
	if err != nil || st.Engine.DeviceAddrBase != engine.SoftwareDeviceAddrBase {
		t.Fatalf("software state: DeviceAddrBase %#x, %v", st.Engine.DeviceAddrBase, err)
	}
	st.Engine.DeviceAddrBase += 2 << 20
	if err := sw.Restore(st); !errors.Is(err, engine.ErrDeviceAddr) {
		t.Fatalf("software restore of another base: %v, want engine.ErrDeviceAddr", err)
	}
}

// TestDeviceAddrRestoreProcess: with a GPU worker per vGPU (isolation
// "process", the default) each vGPU has a device address space of its
// own, so a vGPU of the same gmigd gets another's DEVICE_ADDR_BASE while
// that one still holds it (a destination beside its source), and neither's
// bytes move.
func TestDeviceAddrRestoreProcess(t *testing.T) {
	useCUDA(t)
	p := newPool(t, 16<<20)
	cfg := Config{Name: "a", MemSize: 1 << 20, LocalMemSize: devLocal, Backend: BackendCUDA}
	a, err := New(cfg, p, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	cfg.Name = "b"
	b, err := New(cfg, p, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if a.Config().GPUIsolation != IsolationProcess {
		t.Fatalf("default isolation %q, want %q", a.Config().GPUIsolation, IsolationProcess)
	}
	a.Quiesce()
	b.Quiesce()
	st, err := a.Save()
	if err != nil {
		t.Fatal(err)
	}
	aData := bytes.Repeat([]byte("A"), devLocal)
	bData := bytes.Repeat([]byte("local"), devLocal/5)
	aLocal := []gtt.Extent{{Off: a.Partition().ApertureEnd(), Len: uint64(len(aData))}}
	bLocal := []gtt.Extent{{Off: b.Partition().ApertureEnd(), Len: uint64(len(bData))}}
	if err := a.GPU().Write(aLocal, aData); err != nil {
		t.Fatal(err)
	}
	if err := b.GPU().Write(bLocal, bData); err != nil {
		t.Fatal(err)
	}
	if err := b.Restore(st); err != nil {
		t.Fatalf("restoring a's DEVICE_ADDR_BASE %#x in another worker while a holds it: %v", st.Engine.DeviceAddrBase, err)
	}
	if got := readReg64(t, b, abi.RegDeviceAddrBase); got != st.Engine.DeviceAddrBase || a.GPU().DeviceAddrBase() != got {
		t.Fatalf("b's DEVICE_ADDR_BASE %#x, a's %#x, want both %#x", got, a.GPU().DeviceAddrBase(), st.Engine.DeviceAddrBase)
	}
	for _, c := range []struct {
		v    *VGPU
		xs   []gtt.Extent
		want []byte
	}{{a, aLocal, aData}, {b, bLocal, bData}} {
		got := make([]byte, len(c.want))
		if err := c.v.GPU().Read(got, c.xs); err != nil || !bytes.Equal(got, c.want) {
			t.Fatalf("%s's local memory: %v, or bytes differ", c.v.Config().Name, err)
		}
	}
}
