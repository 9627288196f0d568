package engine

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/engine/cpuref"
)

// The LAUNCH_GRID check of back ends that run guest modules
// (export_test.go): kernels13.ptx's kernels, loaded through the ring, run
// on device buffers and checked against Go.

// gridDevice is device memory a back end gives LAUNCH_GRID kernels
// outside graphics memory (the NVIDIA back end's Device* methods).
type gridDevice interface {
	DeviceAlloc(n uint64) (uint64, error)
	DeviceFree(addr uint64) error
	DeviceWrite(addr uint64, src []byte) error
	DeviceRead(dst []byte, addr uint64) error
}

// gridSizes are the test's problem sizes: a vector length that is no
// multiple of the block (threads past n must do nothing) and a matrix of
// 3×3 tiles.
const (
	gridN    = 1000
	gridPad  = 64 // words past n that must stay untouched
	gridMatN = 48
)

// gridHandles are the handles runLaunchGrid loads the kernels under.
var gridHandles = map[string]uint32{"vecAdd": 1, "scaleAdd": 2, "matMulTiled": 3, "empty": 4}

// loadKernels13 loads each kernel of kernels13.ptx as a module of its own.
func loadKernels13(t testing.TB, h *harness) {
	t.Helper()
	ptx := kernels13(t)
	for _, entry := range []string{"vecAdd", "scaleAdd", "matMulTiled", "empty"} {
		img := append(append([]byte(entry), 0), ptx...)
		h.write(tDataGA, img)
		h.submit(KernelLoadModule{Handle: gridHandles[entry], Args: 1, Image: tDataGA, Len: uint32(len(img))})
	}
	if f := h.ev.takeFaults(); len(f) != 0 {
		t.Fatalf("loading kernels13.ptx: faults %v (%v)", f, f[0].Err)
	}
}

// devBuf puts b in device memory, freed with the test.
func devBuf(t testing.TB, dev gridDevice, b []byte) uint64 {
	t.Helper()
	p, err := dev.DeviceAlloc(uint64(len(b)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := dev.DeviceFree(p); err != nil {
			t.Errorf("DeviceFree: %v", err)
		}
	})
	if err := dev.DeviceWrite(p, b); err != nil {
		t.Fatal(err)
	}
	return p
}

// launchOK runs one LAUNCH_GRID of kernel entry with params and a fence,
// and requires no fault.
func launchOK(t testing.TB, h *harness, entry string, g Grid, params []byte) {
	t.Helper()
	h.write(tGridParams, params)
	h.submit(LaunchGrid{Handle: gridHandles[entry], Grid: g, Params: tGridParams, Len: uint32(len(params))}, Fence{Value: 1})
	if f := h.ev.takeFaults(); len(f) != 0 {
		t.Fatalf("%s: faults %v (%v)", entry, f, f[0].Err)
	}
}

// gridParams lays out a parameter buffer: u64s, then f32/u32 words.
func gridParams(ptrs []uint64, words ...uint32) []byte {
	var b []byte
	for _, p := range ptrs {
		b = le.AppendUint64(b, p)
	}
	for _, w := range words {
		b = le.AppendUint32(b, w)
	}
	return b
}

// canonNaN is the GPU's result for a computed NaN.
func canonNaN(v float32) float32 {
	if v != v {
		return math.Float32frombits(0x7fffffff)
	}
	return v
}

// runLaunchGrid runs vecAdd, scaleAdd, matMulTiled and empty through the
// ring on device buffers of seeded floats (special values among the
// vectors') and requires results bit-identical to Go's: each product and
// sum rounded to binary32 (mul.rn, add.rn, no fma), NaNs canonical,
// nothing written past n. It returns each kernel's output bytes.
func runLaunchGrid(t *testing.T, opt harnessOpt, seed uint64) map[string][]byte {
	h := newHarness(t, 81, 4096, opt)
	dev, ok := h.e.cfg.Backend.(gridDevice)
	if !ok {
		t.Fatalf("%s back end has no device buffers", h.e.cfg.Backend.Name())
	}
	loadKernels13(t, h)
	rng := rand.New(rand.NewPCG(seed, 13))
	vec := func() []byte {
		b := make([]byte, 4*(gridN+gridPad))
		randSpecialFloats(rng, b)
		return b
	}
	read := func(p uint64, n int) []byte {
		b := make([]byte, n)
		if err := dev.DeviceRead(b, p); err != nil {
			t.Fatal(err)
		}
		return b
	}
	f32 := func(b []byte, i int) float32 { return math.Float32frombits(le.Uint32(b[4*i:])) }
	out := map[string][]byte{}
	blocks := uint32((gridN + 255) / 256)
	line := Grid{X: blocks, Y: 1, Z: 1, BlockX: 256, BlockY: 1, BlockZ: 1}

	a, b, c := vec(), vec(), vec()
	pa, pb, pc := devBuf(t, dev, a), devBuf(t, dev, b), devBuf(t, dev, c)
	launchOK(t, h, "vecAdd", line, gridParams([]uint64{pa, pb, pc}, gridN))
	got := read(pc, len(c))
	want := append([]byte(nil), c...)
	for i := range gridN {
		le.PutUint32(want[4*i:], math.Float32bits(canonNaN(f32(a, i)+f32(b, i))))
	}
	checkGridOut(t, "vecAdd", got, want)
	out["vecAdd"] = got

	x, y := vec(), vec()
	px, py := devBuf(t, dev, x), devBuf(t, dev, y)
	alpha := float32(-1.75)
	launchOK(t, h, "scaleAdd", line, gridParams([]uint64{px, py}, math.Float32bits(alpha), gridN))
	got = read(py, len(y))
	want = append([]byte(nil), y...)
	cpuref.Saxpy(alpha, cpuref.F32View(x[:4*gridN]), cpuref.F32View(want[:4*gridN]))
	checkGridOut(t, "scaleAdd", got, want)
	out["scaleAdd"] = got

	const n = gridMatN
	mat := func() []byte {
		m := make([]byte, 4*n*n)
		for i := range n * n {
			le.PutUint32(m[4*i:], math.Float32bits(float32(rng.NormFloat64())))
		}
		return m
	}
	ma, mb, mc := mat(), mat(), mat()
	pma, pmb, pmc := devBuf(t, dev, ma), devBuf(t, dev, mb), devBuf(t, dev, mc)
	tiles := Grid{X: n / 16, Y: n / 16, Z: 1, BlockX: 16, BlockY: 16, BlockZ: 1}
	launchOK(t, h, "matMulTiled", tiles, gridParams([]uint64{pma, pmb, pmc}, n))
	got = read(pmc, len(mc))
	want = make([]byte, len(mc))
	for row := range n {
		for col := range n {
			var acc float32
			for k := range n {
				acc = float32(acc + float32(f32(ma, row*n+k)*f32(mb, k*n+col)))
			}
			le.PutUint32(want[4*(row*n+col):], math.Float32bits(canonNaN(acc)))
		}
	}
	checkGridOut(t, "matMulTiled", got, want)
	out["matMulTiled"] = got

	launchOK(t, h, "empty", Grid{X: 1024, Y: 1, Z: 1, BlockX: 128, BlockY: 1, BlockZ: 1}, nil)
	return out
}

// checkGridOut requires got == want, naming the first word that differs.
func checkGridOut(t testing.TB, name string, got, want []byte) {
	t.Helper()
	for i := 0; i+4 <= len(want); i += 4 {
		if g, w := le.Uint32(got[i:]), le.Uint32(want[i:]); g != w {
			t.Fatalf("%s: word %d = %#08x, want %#08x", name, i/4, g, w)
		}
	}
}

// runLaunchGridFault launches vecAdd onto a device address outside every
// allocation: the launch retires, the FENCE's sync finds the failure and
// reports it as a KERNEL fault at the launch's ring offset with
// CUDA_ERROR_LAUNCH_FAILED on its stream; then the vGPU goes on, and a
// KERNEL_UNLOAD after another such launch finds it the same way. Only for
// back ends whose device survives a faulting kernel (the CUDA model; on a
// real GPU the context is lost).
func runLaunchGridFault(t *testing.T, opt harnessOpt) {
	h := newHarness(t, 82, 4096, opt, func(h *harness, c *Config) { c.Streams = true })
	loadKernels13(t, h)
	h.write(tGridParams, gridParams([]uint64{0x10, 0x10, 0x10}, 8))
	off := h.pushOn(7, LaunchGrid{Handle: gridHandles["vecAdd"], Grid: grid1, Params: tGridParams, Len: 28})
	h.doorbell()
	h.wait()
	if f := h.ev.takeFaults(); len(f) != 0 {
		t.Fatalf("faults before the fence: %+v", f)
	}
	h.submit(Fence{Value: 5})
	f := h.ev.takeFaults()
	if len(f) != 1 || f[0].Code != abi.ErrKernel || f[0].Opcode != abi.OpLaunchGrid || f[0].RingOffset != off {
		t.Fatalf("faults %+v, want one KERNEL of LAUNCH_GRID at %d", f, off)
	}
	t.Logf("reported: %v", f[0].Err)
	if code, _ := h.e.Stream(7); code != abi.CudaErrorLaunchFailed {
		t.Errorf("stream 7 code %d, want %d", code, abi.CudaErrorLaunchFailed)
	}
	if r := h.e.Regs(); r.FenceDone != 5 {
		t.Errorf("FENCE_DONE %d, want 5", r.FenceDone)
	}

	// The failure is sticky, as CUDA's is for the context: a later
	// command that runs on the device fails, answering 719 on its stream,
	// and so does a later launch.
	h.pushOn(9, Fill{Dst: tDataGA, Len: 4096, Pattern: 1})
	off = h.pushOn(10, LaunchGrid{Handle: gridHandles["empty"], Grid: grid1, Params: tGridParams})
	h.doorbell()
	h.wait()
	f = h.ev.takeFaults()
	if len(f) != 2 || f[0].Code != abi.ErrCommand || f[0].Opcode != abi.OpFill || f[1].Code != abi.ErrKernel || f[1].RingOffset != off {
		t.Fatalf("after the fault: faults %+v, want the FILL's COMMAND and the launch's KERNEL at %d", f, off)
	}
	for _, s := range []uint32{9, 10} {
		if code, _ := h.e.Stream(s); code != abi.CudaErrorLaunchFailed {
			t.Errorf("stream %d code %d after the fault, want %d", s, code, abi.CudaErrorLaunchFailed)
		}
	}

	// Unloading a module waits for its queued kernels: the failure is
	// reported then, against the launch (a fresh back end: the first one's
	// context is lost).
	h = newHarness(t, 82, 4096, opt, func(h *harness, c *Config) { c.Streams = true })
	loadKernels13(t, h)
	h.write(tGridParams, gridParams([]uint64{0x10, 0x10, 0x10}, 8))
	off = h.pushOn(8, LaunchGrid{Handle: gridHandles["vecAdd"], Grid: grid1, Params: tGridParams, Len: 28})
	h.pushOn(9, KernelUnload{Handle: gridHandles["vecAdd"]})
	h.doorbell()
	h.wait()
	if f := h.ev.takeFaults(); len(f) != 1 || f[0].Opcode != abi.OpLaunchGrid || f[0].RingOffset != off {
		t.Fatalf("unload after a faulting launch: faults %+v, want the launch's at %d", f, off)
	}
	if code, _ := h.e.Stream(8); code != abi.CudaErrorLaunchFailed {
		t.Errorf("stream 8 code %d, want %d", code, abi.CudaErrorLaunchFailed)
	}
}

// benchLaunchGrid measures LAUNCH_GRID of the empty kernel through the
// ring: batches of 1000 launches, then one fence, per doorbell.
func benchLaunchGrid(b *testing.B, opt harnessOpt) {
	h := newHarness(b, 83, 1<<16, opt)
	loadKernels13(b, h)
	const batch = 1000
	var ring []byte // encoded once: the loop measures the engine alone
	for range batch {
		ring = append(ring, encode(LaunchGrid{Handle: gridHandles["empty"], Grid: grid1})...)
	}
	ring = append(ring, encode(Fence{Value: 1})...)
	b.ReportAllocs()
	for b.Loop() {
		h.pushBytes(ring)
		h.doorbell()
		h.wait()
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/launch")
	if f := h.ev.takeFaults(); len(f) != 0 {
		b.Fatalf("faults %v (%v)", f, f[0].Err)
	}
}
