package migtest

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/apilog"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/vfio"
	"github.com/gmig-dev/gmig/vgpu"
)

// Dev is a vGPU driven directly through its vfio.Device methods, without a
// guest: its GTT maps graphics page i onto aperture page Perm[i], and a
// one-page ring sits at graphics address 0.
type Dev struct {
	T    testing.TB
	V    *vgpu.VGPU
	Perm []int
	Tail uint32 // ring bytes written
	// Guest is the aperture as the guest CPU maps it, which the test's
	// CPU stores (Page, Ring) go through; nil: the vGPU's own memory.
	Guest []byte
}

// Graphics pages and kernel handles the device tests use.
const (
	GSaxpyX, GSaxpyY = 40, 41
	GFillLive        = 30 // the engine fills it between Precopy and Stop
	GFillAfter       = 31 // the destination fills it after the migration
	GCPUWrite        = 50 // the guest CPU rewrites it between Precopy and Stop
	GUndone          = 51 // written and restored between Precopy and Stop
	GZeroed          = 52 // zeroed between Precopy and Stop
	HSaxpy, HRender  = 0x10, 0x11
	saxpyN           = abi.PageSize / 4
)

// ConfigWrites are the guest's config-space writes NewDev makes, as the
// vGPU's API log records them (compacted, in order).
var ConfigWrites = []apilog.Entry{
	{Kind: apilog.ConfigWrite, Offset: 0x10, Size: 4, Arg: 0xfe000000}, // BAR0
	{Kind: apilog.ConfigWrite, Offset: 0x3c, Size: 1, Arg: 11},         // interrupt line
	{Kind: apilog.ConfigWrite, Offset: 0x04, Size: 2, Arg: 0x0006},     // command: memory, bus master
}

func put32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func put64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

// Write writes b to region at off.
func (d *Dev) Write(region uint32, off uint64, b []byte) {
	d.T.Helper()
	if err := d.V.WriteRegion(region, off, b); err != nil {
		d.T.Fatal(err)
	}
}

// NewDev creates a vGPU of mem bytes in p and programs config space
// (ConfigWrites), the GTT (a permutation of seed), the interrupt mask and
// the ring.
func NewDev(t testing.TB, p *pool.Pool, name string, mem uint64, seed uint64) *Dev {
	t.Helper()
	v := NewVGPU(t, p, name, mem)
	for _, w := range ConfigWrites {
		if err := v.WriteRegion(vfio.PCIConfigRegionIndex, uint64(w.Offset), put32(w.Arg)[:w.Size]); err != nil {
			t.Fatal(err)
		}
	}
	return Program(t, v, seed)
}

// Program gives an existing vGPU a GTT (a permutation of seed), an
// interrupt mask, a scratch value and an enabled one-page ring at graphics
// address 0.
func Program(t testing.TB, v *vgpu.VGPU, seed uint64) *Dev {
	t.Helper()
	pages := int(v.Config().MemSize / abi.PageSize)
	d := &Dev{T: t, V: v, Perm: rand.New(rand.NewPCG(seed, 1)).Perm(pages)}
	for i, a := range d.Perm {
		d.Write(abi.BARRegs, abi.GTTOffset+8*uint64(i), put64(uint64(a)<<abi.PageShift|abi.GTTValid|abi.GTTWritable))
	}
	d.Write(abi.BARRegs, abi.RegIntMask, put32(abi.IntFence|abi.IntError))
	d.Write(abi.BARRegs, abi.RegScratch, put32(0x5eed))
	d.Write(abi.BARRegs, abi.RegRingBase, put64(0))
	d.Write(abi.BARRegs, abi.RegRingSize, put32(abi.PageSize))
	d.Write(abi.BARRegs, abi.RegControl, put32(abi.ControlEnable))
	return d
}

// On returns a Dev for v, a migrated copy of d's vGPU: same GTT, same ring.
func (d *Dev) On(v *vgpu.VGPU) *Dev { return &Dev{T: d.T, V: v, Perm: d.Perm, Tail: d.Tail} }

// Page returns graphics page g's bytes.
func (d *Dev) Page(g int) []byte {
	a, mem := d.Perm[g], d.Guest
	if mem == nil {
		mem = d.V.Memory()
	}
	return mem[a*abi.PageSize : (a+1)*abi.PageSize]
}

// Ring writes cmds into the ring after the previous ones and rings the
// doorbell.
func (d *Dev) Ring(cmds []byte) {
	d.T.Helper()
	if int(d.Tail)+len(cmds) > abi.PageSize {
		d.T.Fatal("test ring full")
	}
	copy(d.Page(0)[d.Tail:], cmds)
	d.Tail += uint32(len(cmds))
	d.Write(abi.BARRegs, abi.RegDoorbell, put32(d.Tail))
}

// Submit rings cmds and waits until the engine is idle.
func (d *Dev) Submit(cmds []byte) {
	d.T.Helper()
	d.Ring(cmds)
	d.WaitIdle()
}

// WaitIdle waits until the engine has run everything rung.
func (d *Dev) WaitIdle() {
	d.T.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.V.Engine().WaitIdle(ctx); err != nil {
		d.T.Fatal(err)
	}
}

// FillMemory gives the vGPU content: random pages, zero pages, float
// arrays for SAXPY, kernel objects (one loaded, one unloaded, many loaded
// and unloaded for a raw API log longer than the compacted one) and a
// completed fence.
func (d *Dev) FillMemory(seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 2))
	for g := 1; g < len(d.Perm); g++ {
		if rng.IntN(3) == 0 {
			continue
		}
		pg := d.Page(g)
		for i := 0; i < len(pg); i += 8 {
			binary.LittleEndian.PutUint64(pg[i:], rng.Uint64())
		}
	}
	for _, g := range []int{GSaxpyX, GSaxpyY} {
		pg := d.Page(g)
		for i := 0; i < len(pg); i += 4 {
			binary.LittleEndian.PutUint32(pg[i:], math.Float32bits(float32(rng.Float64())))
		}
	}
	var cmds []byte
	cmds = guest.AppendKernelLoad(cmds, HSaxpy, abi.KernelSaxpy)
	cmds = guest.AppendKernelLoad(cmds, HRender, abi.KernelRender)
	for h := uint32(0x20); h < 0x30; h++ {
		cmds = guest.AppendKernelLoad(cmds, h, abi.KernelStencil)
		cmds = guest.AppendKernelUnload(cmds, h)
	}
	cmds = guest.AppendKernelUnload(cmds, HRender)
	cmds = guest.AppendFence(cmds, abi.FenceInterrupt, 7, 0)
	d.Submit(cmds)
}

// RunWhileLive is what the VM does between Precopy and Stop: the guest CPU
// rewrites GCPUWrite, writes GUndone and restores it, zeroes GZeroed, and
// the engine fills GFillLive.
func (d *Dev) RunWhileLive(seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 3))
	pg := d.Page(GCPUWrite)
	for i := range pg {
		pg[i] = byte(rng.Uint32())
	}
	u := d.Page(GUndone)
	old := append([]byte(nil), u...)
	clear(u)
	copy(u, old)
	clear(d.Page(GZeroed))
	d.Submit(Fill(GFillLive, 0xfeedf00d))
}

// Saxpy launches handle on the SAXPY pages and reports whether the device
// counted a fault.
func (d *Dev) Saxpy(handle uint32) (faulted bool) {
	before := d.V.Stats().Faults
	d.Submit(guest.AppendLaunch(nil, handle, guest.SaxpyArgs(saxpyN, 2, GSaxpyX*abi.PageSize, GSaxpyY*abi.PageSize)...))
	return d.V.Stats().Faults != before
}

// Fill is one FILL of graphics page g with pattern.
func Fill(g int, pattern uint32) []byte {
	return guest.AppendFill(nil, uint64(g)*abi.PageSize, abi.PageSize, pattern)
}

// CheckRunsAfter checks that dst, d's vGPU migrated and running, launches
// the kernel loaded before the migration but neither the one unloaded
// before it nor an unknown handle, and that its engine writes its own
// partition, not d's.
func (d *Dev) CheckRunsAfter(dst *vgpu.VGPU) {
	t := d.T
	t.Helper()
	dd := d.On(dst)
	before := append([]byte(nil), d.Page(GFillAfter)...)
	dd.Submit(Fill(GFillAfter, 0xabcdef01))
	if p := dd.Page(GFillAfter); p[0] != 0x01 || p[3] != 0xab || p[abi.PageSize-1] != 0xab {
		t.Fatalf("FILL on the destination did not land in its partition: % x", p[:8])
	}
	if !bytes.Equal(d.Page(GFillAfter), before) {
		t.Fatal("FILL on the destination changed the source's memory")
	}
	if dd.Saxpy(HSaxpy) {
		t.Fatal("a kernel loaded before the migration does not launch after it")
	}
	if !dd.Saxpy(HRender + 0x100) {
		t.Fatal("an unknown handle launched")
	}
	if !dd.Saxpy(HRender) {
		t.Fatal("a kernel unloaded before the migration launched after it")
	}
}
