package engine

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/gtt"
)

// Device addresses as command operands (ABI 1.3, resolve.go): every
// command on device-local memory through DEVICE_ADDR_BASE + l, the same
// bytes on every back end, refusals of ranges outside it, exact marks.

// tLocal is the test vGPU's device-local memory: 2 MiB, the model's
// allocation granularity.
const tLocal = 2 << 20

// withLocal gives the harness tLocal bytes of device-local memory after
// its pool (extents from len(pool) on) on newB's back end, or on the
// software back end when newB is nil.
func withLocal(newB NewLocalBackend) harnessOpt {
	return func(h *harness, c *Config) {
		n := uint64(len(h.pool))
		c.Local = gtt.Extent{Off: n, Len: tLocal}
		if newB != nil {
			c.Backend = newB(h.t, h.pool, tLocal)
			return
		}
		mem := make([]byte, n+tLocal)
		copy(mem, h.pool)
		h.pool = mem[:n:n]
		c.Backend = NewSoftwareLocal(mem)
	}
}

// wantFault submits c alone and requires one PAGE_FAULT on it.
func wantFault(t *testing.T, h *harness, what string, c Command) {
	t.Helper()
	h.submit(c)
	f := h.ev.takeFaults()
	if len(f) != 1 || f[0].Code != abi.ErrPageFault {
		t.Fatalf("%s: faults %+v, want one PAGE_FAULT", what, f)
	}
}

// runDeviceAddr runs every command kind with device-address operands on a
// harness with device-local memory and checks the bytes, the marks and
// the refusals; it returns what the program left in graphics memory and
// guest RAM, for comparing back ends.
func runDeviceAddr(t *testing.T, newB NewLocalBackend) []byte {
	h := newHarness(t, 11, abi.RingMinSize, withLocal(newB))
	b := h.e.cfg.Backend.DeviceAddrBase()
	if b < graphicsLimit || b%(2<<20) != 0 {
		t.Fatalf("DEVICE_ADDR_BASE %#x: want a 2 MiB multiple at or above 2^32", b)
	}
	src := h.read(tDataGA+0x2000, 0x800)
	ram := bytes.Clone(h.ram.mem[:0x3000])
	h.submit(
		Fill{Dst: b + 0x1000, Len: 0x2000, Pattern: 0xa5a50001},
		DMA{ToGfx: true, GA: b + 0x4000, GPA: 0, Len: 0x3000},
		Copy{Dst: b + 0x10000, Src: b + 0x1000, Len: 0x6000},
		Copy{Dst: tDataGA, Src: b + 0x4000, Len: 0x1000},
		Copy{Dst: b + tLocal - 0x800, Src: tDataGA + 0x2000, Len: 0x800},
		Fence{WriteMem: true, Addr: b + 0x30000, Value: 7},
		DMA{GA: b + 0x10000, GPA: 0x8000, Len: 0x6000},
		Copy{Dst: tDataGA + 0x40000, Src: b, Len: 0x40000},
		Copy{Dst: tDataGA + 0x80000, Src: b + tLocal - 0x1000, Len: 0x1000},
		Fence{Value: 1},
	)
	if f := h.ev.takeFaults(); len(f) != 0 {
		t.Fatalf("faults %+v (%v)", f, f[0].Err)
	}
	fill := bytes.Repeat([]byte{0x01, 0x00, 0xa5, 0xa5}, 0x800)
	want := func(what string, got, want []byte) {
		t.Helper()
		if i := firstDiffAt(got, want); i >= 0 {
			t.Fatalf("%s differs at byte %#x", what, i)
		}
	}
	want("FILL through a device address", h.read(tDataGA+0x40000+0x1000, 0x2000), fill)
	want("DMA_TO_GFX through a device address", h.read(tDataGA+0x40000+0x4000, 0x3000), ram)
	want("COPY local to aperture", h.read(tDataGA, 0x1000), ram[:0x1000])
	want("COPY aperture to local's last bytes", h.read(tDataGA+0x80000+0x800, 0x800), src)
	want("DMA_FROM_GFX through a device address", h.ram.mem[0x8000:0xe000], slices.Concat(fill, make([]byte, 0x1000), ram))
	if v := le.Uint64(h.read(tDataGA+0x40000+0x30000, 8)); v != 7 {
		t.Fatalf("FENCE through a device address wrote %d, want 7", v)
	}
	// Marks: the engine reports exactly the local bytes each command wrote.
	h.ev.mu.Lock()
	marks := h.ev.wrote
	h.ev.mu.Unlock()
	if len(marks) < 3 || !equalExtents(marks[0], []gtt.Extent{{Off: uint64(len(h.pool)) + 0x1000, Len: 0x2000}}) ||
		!equalExtents(marks[2], []gtt.Extent{{Off: uint64(len(h.pool)) + 0x10000, Len: 0x6000}}) {
		t.Fatalf("marks %v: want the FILL's and the COPY's local extents", marks)
	}

	before := h.read(tDataGA, 0x1000)
	wantFault(t, h, "COPY straddling local memory's end", Copy{Dst: tDataGA, Src: b + tLocal - 0x800, Len: 0x1000})
	h.submit(Copy{Dst: b, Src: b + tLocal, Len: 1})
	if f := h.ev.takeFaults(); len(f) != 1 || !errors.Is(f[0].Err, gtt.ErrFault) {
		t.Fatalf("COPY from just past local memory: faults %+v, want one wrapping gtt.ErrFault", f)
	}
	want("the refused COPY's destination", h.read(tDataGA, 0x1000), before)
	wantFault(t, h, "FILL straddling DEVICE_ADDR_BASE", Fill{Dst: b - 0x1000, Len: 0x2000})
	wantFault(t, h, "COPY below 2^32 straddling it", Copy{Dst: graphicsLimit - 0x1000, Src: tDataGA, Len: 0x2000})
	wantFault(t, h, "COPY above local memory", Copy{Dst: tDataGA, Src: b + tLocal, Len: 8})
	wantFault(t, h, "FENCE past local memory", Fence{WriteMem: true, Addr: b + tLocal, Value: 1})
	wantFault(t, h, "DMA straddling local memory's end", DMA{ToGfx: true, GA: b + tLocal - 8, Len: 16})
	wantFault(t, h, "module image straddling local memory's end", KernelLoadModule{Handle: 9, Args: 1, Image: b + tLocal - 8, Len: 16})
	wantFault(t, h, "FILL between 2^32 and DEVICE_ADDR_BASE", Fill{Dst: graphicsLimit, Len: 4})
	return append(h.gfx(), h.ram.mem...)
}

func equalExtents(a, b []gtt.Extent) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestDeviceAddrSoftware(t *testing.T) {
	runDeviceAddr(t, nil)
}

// TestDeviceAddrOnlyWithLocalMemory: a vGPU without device addresses (no
// local memory) faults on them as on any address beyond its GTT.
func TestDeviceAddrOnlyWithLocalMemory(t *testing.T) {
	h := newHarness(t, 3, abi.RingMinSize)
	wantFault(t, h, "COPY from SoftwareDeviceAddrBase without local memory", Copy{Dst: tDataGA, Src: SoftwareDeviceAddrBase, Len: 8})
}

// TestDeviceAddrModuleImage: a module image at a device address is read
// from local memory (the software back end then refuses to run modules:
// KERNEL, not PAGE_FAULT).
func TestDeviceAddrModuleImage(t *testing.T) {
	h := newHarness(t, 5, abi.RingMinSize, withLocal(nil))
	img := append([]byte("empty\x00"), kernels13(t)...)
	h.write(tDataGA, img)
	b := h.e.cfg.Backend.DeviceAddrBase()
	h.submit(Copy{Dst: b + 0x3000, Src: tDataGA, Len: uint64(len(img))},
		KernelLoadModule{Handle: 1, Args: 1, Image: b + 0x3000, Len: uint32(len(img))})
	f := h.ev.takeFaults()
	if len(f) != 1 || f[0].Code != abi.ErrKernel || !errors.Is(f[0].Err, ErrNoModules) {
		t.Fatalf("faults %+v: want the software back end's KERNEL error for a module it read", f)
	}
}

// runDeviceAddrGrid loads vecAdd from a device address and launches it
// with its parameter buffer at a device address on buffers in local
// memory (back ends that run modules).
func runDeviceAddrGrid(t *testing.T, newB NewLocalBackend) {
	h := newHarness(t, 13, abi.RingMinSize, withLocal(newB))
	b := h.e.cfg.Backend.DeviceAddrBase()
	img := append([]byte("vecAdd\x00"), kernels13(t)...)
	h.write(tDataGA, img)
	const n = 300
	a, c, out := b+0x10000, b+0x20000, b+0x30000
	in := make([]byte, 4*n)
	for i := range n {
		le.PutUint32(in[4*i:], math.Float32bits(float32(i)/4))
	}
	h.write(tDataGA+0x10000, in)
	params := gridParams([]uint64{a, c, out}, n)
	h.write(tDataGA+0x20000, params)
	h.submit(Copy{Dst: b + 0x3000, Src: tDataGA, Len: uint64(len(img))},
		KernelLoadModule{Handle: 1, Args: 1, Image: b + 0x3000, Len: uint32(len(img))},
		Copy{Dst: a, Src: tDataGA + 0x10000, Len: 4 * n},
		Copy{Dst: c, Src: tDataGA + 0x10000, Len: 4 * n},
		Copy{Dst: b + 0x40000, Src: tDataGA + 0x20000, Len: uint64(len(params))},
		LaunchGrid{Handle: 1, Grid: Grid{X: 3, Y: 1, Z: 1, BlockX: 128, BlockY: 1, BlockZ: 1}, Params: b + 0x40000, Len: uint32(len(params))},
		Copy{Dst: tDataGA + 0x30000, Src: out, Len: 4 * n},
		Fence{Value: 1})
	if f := h.ev.takeFaults(); len(f) != 0 {
		t.Fatalf("faults %+v (%v)", f, f[0].Err)
	}
	got := h.read(tDataGA+0x30000, 4*n)
	for i := range n {
		if v := math.Float32frombits(le.Uint32(got[4*i:])); v != float32(i)/4+float32(i)/4 {
			t.Fatalf("c[%d] = %v, want %v", i, v, float32(i)/2)
		}
	}
}
