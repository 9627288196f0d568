package precopy

import (
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/internal/vgpu"
	"github.com/gmig-dev/gmig/vfio"
)

// dev is a vGPU driven directly through its vfio.Device methods, without a
// guest: its GTT maps graphics page i onto aperture page perm[i], and a
// one-page ring sits at graphics address 0.
type dev struct {
	t    *testing.T
	v    *vgpu.VGPU
	perm []int
	tail uint32
}

func put32(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
func put64(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }

func (d *dev) write(region uint32, off uint64, b []byte) {
	d.t.Helper()
	if err := d.v.WriteRegion(region, off, b); err != nil {
		d.t.Fatal(err)
	}
}

// newDev creates a vGPU of mem bytes in p and programs config space, the
// GTT, the interrupt mask and the ring.
func newDev(t *testing.T, p *pool.Pool, name string, mem uint64, seed uint64) *dev {
	t.Helper()
	v := newVGPU(t, p, name, mem)
	pages := int(mem / abi.PageSize)
	d := &dev{t: t, v: v, perm: rand.New(rand.NewPCG(seed, 1)).Perm(pages)}
	d.write(vfio.PCIConfigRegionIndex, 0x10, put32(0xfe000000))
	d.write(vfio.PCIConfigRegionIndex, 0x3c, []byte{11})
	d.write(vfio.PCIConfigRegionIndex, 0x04, []byte{0x06, 0x00})
	for i, a := range d.perm {
		d.write(abi.BARRegs, abi.GTTOffset+8*uint64(i), put64(uint64(a)<<abi.PageShift|abi.GTTValid|abi.GTTWritable))
	}
	d.write(abi.BARRegs, abi.RegIntMask, put32(abi.IntFence|abi.IntError))
	d.write(abi.BARRegs, abi.RegScratch, put32(0x5eed))
	d.write(abi.BARRegs, abi.RegRingBase, put64(0))
	d.write(abi.BARRegs, abi.RegRingSize, put32(abi.PageSize))
	d.write(abi.BARRegs, abi.RegControl, put32(abi.ControlEnable))
	return d
}

// page returns graphics page g's bytes.
func (d *dev) page(g int) []byte {
	a := d.perm[g]
	return d.v.Memory()[a*abi.PageSize : (a+1)*abi.PageSize]
}

// submit writes cmds into the ring after the previous ones, rings the
// doorbell and waits until the engine is idle.
func (d *dev) submit(cmds []byte) {
	d.t.Helper()
	if int(d.tail)+len(cmds) > abi.PageSize {
		d.t.Fatal("test ring full")
	}
	copy(d.page(0)[d.tail:], cmds)
	d.tail += uint32(len(cmds))
	d.write(abi.BARRegs, abi.RegDoorbell, put32(d.tail))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.v.Engine().WaitIdle(ctx); err != nil {
		d.t.Fatal(err)
	}
}

// Graphics pages the device tests use.
const (
	gSaxpyX, gSaxpyY = 40, 41
	gFillLive        = 30 // the engine fills it between Precopy and Stop
	gFillAfter       = 31 // the destination fills it after the migration
	gCPUWrite        = 50 // the guest CPU rewrites it between Precopy and Stop
	gUndone          = 51 // written and restored between Precopy and Stop
	gZeroed          = 52 // zeroed between Precopy and Stop
	hSaxpy, hRender  = 0x10, 0x11
	saxpyN           = abi.PageSize / 4
)

// fillMemory gives the vGPU content: random pages, zero pages, float
// arrays for SAXPY, kernel objects (one loaded, one unloaded, many loaded
// and unloaded for a raw API log longer than the compacted one) and a
// completed fence.
func (d *dev) fillMemory(seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 2))
	for g := 1; g < len(d.perm); g++ {
		if rng.IntN(3) == 0 {
			continue
		}
		pg := d.page(g)
		for i := 0; i < len(pg); i += 8 {
			binary.LittleEndian.PutUint64(pg[i:], rng.Uint64())
		}
	}
	for _, g := range []int{gSaxpyX, gSaxpyY} {
		pg := d.page(g)
		for i := 0; i < len(pg); i += 4 {
			binary.LittleEndian.PutUint32(pg[i:], math.Float32bits(float32(rng.Float64())))
		}
	}
	var cmds []byte
	cmds = guest.AppendKernelLoad(cmds, hSaxpy, abi.KernelSaxpy)
	cmds = guest.AppendKernelLoad(cmds, hRender, abi.KernelRender)
	for h := uint32(0x20); h < 0x30; h++ {
		cmds = guest.AppendKernelLoad(cmds, h, abi.KernelStencil)
		cmds = guest.AppendKernelUnload(cmds, h)
	}
	cmds = guest.AppendKernelUnload(cmds, hRender)
	cmds = guest.AppendFence(cmds, abi.FenceInterrupt, 7, 0)
	d.submit(cmds)
}

// runWhileLive is what the VM does between Precopy and Stop.
func (d *dev) runWhileLive(seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 3))
	pg := d.page(gCPUWrite)
	for i := range pg {
		pg[i] = byte(rng.Uint32())
	}
	u := d.page(gUndone)
	old := append([]byte(nil), u...)
	clear(u)
	copy(u, old)
	clear(d.page(gZeroed))
	d.submit(guest.AppendFill(nil, gFillLive*abi.PageSize, abi.PageSize, 0xfeedf00d))
}

// saxpy launches handle on the SAXPY pages and reports whether the device
// counted a fault.
func (d *dev) saxpy(handle uint32) (faulted bool) {
	before := d.v.Stats().Faults
	d.submit(guest.AppendLaunch(nil, handle, guest.SaxpyArgs(saxpyN, 2, gSaxpyX*abi.PageSize, gSaxpyY*abi.PageSize)...))
	return d.v.Stats().Faults != before
}

// guest_fill is one FILL of graphics page g with pattern.
func guest_fill(g int, pattern uint32) []byte {
	return guest.AppendFill(nil, uint64(g)*abi.PageSize, abi.PageSize, pattern)
}
