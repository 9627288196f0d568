package cudadrv

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/vgpu"
)

// kernelsPTX is the file of the ABI 1.3 test kernels the CUDA model plays
// by name (vecAdd, scaleAdd, matMulTiled, empty, scribble), the engine's.
const kernelsPTX = "../../engine/nvidia/testdata/kernels13.ptx"

// newGridLib is a Lib on the CUDA back end's model with guest modules and
// device-local memory, initialised, a context current: the device of
// LAUNCH_GRID (CAPS bit 7). It skips, saying why, where the device side of
// ABI 1.3 has not landed: such a vGPU cannot be created, or it has no
// CAPS bit 7.
func newGridLib(t testing.TB, lc Config) *Lib {
	t.Helper()
	t.Setenv("GMIG_CUDA_MODEL", "1") // migtest.UseCUDAModel, which takes a *testing.T only
	l, _ := gridLibIn(t, migtest.NewPool(t, 2*(testMem+localSize)), "grid", "", lc)
	return l
}

// gridLibIn is newGridLib's Lib on a vGPU named name in pool p, its GPU
// context where isolation says (vgpu.Config.GPUIsolation; "" for the
// default), and the vGPU.
func gridLibIn(t testing.TB, p *pool.Pool, name, isolation string, lc Config) (*Lib, *vgpu.VGPU) {
	t.Helper()
	cfg := localConfig()
	cfg.Name, cfg.MemSize, cfg.Backend, cfg.GuestModules, cfg.GPUIsolation = name, testMem, vgpu.BackendCUDA, true, isolation
	v, err := vgpu.New(cfg, p, migtest.Log)
	if errors.Is(err, vgpu.ErrConfig) {
		t.Skipf("skipping: %v (ABI 1.3: the CUDA model with device-local memory has not landed)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	s := migtest.Serve(t, v)
	open := func() (guest.Bus, error) {
		b, err := sim.Attach(s.Path, sim.Options{NoIRQ: true})
		if err == nil {
			t.Cleanup(func() { b.Close() })
		}
		return b, err
	}
	lc.Open, lc.Log = open, zerolog.Nop()
	l := New(lc)
	if r := l.Init(0); r != Success {
		t.Fatal(r.Error())
	}
	if caps := l.Driver().Caps(); caps&abi.CapLaunchGrid == 0 {
		t.Skipf("skipping: the CUDA model's vGPU has no CAPS bit 7 (CAPS %#x): LAUNCH_GRID has not landed in the device", caps)
	}
	if _, r := l.CtxCreate(thread, 0, 0); r != Success {
		t.Fatal(r.Error())
	}
	return l, v
}

// loadFunction loads kernelsPTX and returns entry's function.
func loadFunction(t testing.TB, l *Lib, entry string) Handle {
	t.Helper()
	ptx, err := os.ReadFile(kernelsPTX)
	if err != nil {
		t.Fatal(err)
	}
	m, r := l.ModuleLoadData(thread, ptx)
	if r != Success {
		t.Fatal(r.Error())
	}
	f, r := l.ModuleGetFunction(m, entry)
	if r != Success {
		t.Fatal(r.Error())
	}
	return f
}

// paramBuf lays out values (uint64, uint32, float32) one after another at
// their natural alignment, as the test kernels' layouts are.
func paramBuf(values ...any) []byte {
	var b []byte
	for _, v := range values {
		switch v := v.(type) {
		case uint64:
			for len(b)%8 != 0 {
				b = append(b, 0)
			}
			b = binary.LittleEndian.AppendUint64(b, v)
		case uint32:
			b = binary.LittleEndian.AppendUint32(b, v)
		case float32:
			b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
		}
	}
	return b
}

func floats(b []byte) []float32 {
	f := make([]float32, len(b)/4)
	for i := range f {
		f[i] = math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:]))
	}
	return f
}

func floatBytes(f []float32) []byte {
	b := make([]byte, 0, 4*len(f))
	for _, v := range f {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(v))
	}
	return b
}

// inputs are n floats that exercise rounding (thirds, negative, tiny).
func inputs(n int, seed float32) []float32 {
	f := make([]float32, n)
	for i := range f {
		f[i] = (float32(i%97) - 48) / 3 * seed
	}
	return f
}

func upload(t *testing.T, l *Lib, f []float32) uint64 {
	t.Helper()
	p, r := l.MemAlloc(thread, uint64(4*len(f)))
	must(t, r)
	must(t, l.MemcpyHtoD(thread, p, floatBytes(f)))
	return p
}

func download(t *testing.T, l *Lib, p uint64, n int) []float32 {
	t.Helper()
	b := make([]byte, 4*n)
	must(t, l.MemcpyDtoH(thread, b, p))
	return floats(b)
}

func sameBits(t *testing.T, what string, got, want []float32) {
	t.Helper()
	for i := range want {
		if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
			t.Fatalf("%s: element %d is %v, want %v", what, i, got[i], want[i])
		}
	}
}

// TestGridLaunches runs the ABI 1.3 test kernels through cuLaunchKernel's
// LAUNCH_GRID path and checks every result bit for bit against Go's
// float32 arithmetic (each product rounded before the sum, as mul.rn then
// add.rn).
func TestGridLaunches(t *testing.T) {
	l := newGridLib(t, Config{})
	const n = 1000
	a, b := inputs(n, 1), inputs(n, -0.7)
	pa, pb := upload(t, l, a), upload(t, l, b)
	pc, r := l.MemAlloc(thread, 4*n)
	must(t, r)

	vecAdd := loadFunction(t, l, "vecAdd")
	must(t, l.LaunchKernel(thread, vecAdd, [3]uint32{(n + 255) / 256, 1, 1}, [3]uint32{256, 1, 1}, 0, 0, paramBuf(pa, pb, pc, uint32(n))))
	sum := make([]float32, n)
	for i := range sum {
		sum[i] = a[i] + b[i]
	}
	sameBits(t, "vecAdd", download(t, l, pc, n), sum)

	scaleAdd := loadFunction(t, l, "scaleAdd")
	const alpha = float32(1.0 / 3)
	// Half the elements, at an offset inside the allocations.
	must(t, l.LaunchKernel(thread, scaleAdd, [3]uint32{4, 1, 1}, [3]uint32{128, 1, 1}, 0, 0, paramBuf(pa+4, pc+4, alpha, uint32(n/2))))
	for i := 1; i <= n/2; i++ {
		sum[i] = float32(alpha*a[i]) + sum[i]
	}
	sameBits(t, "scaleAdd", download(t, l, pc, n), sum)

	const m = 48 // 3×3 tiles
	A, B := inputs(m*m, 0.25), inputs(m*m, -1.5)
	pA, pB := upload(t, l, A), upload(t, l, B)
	pC, r := l.MemAlloc(thread, 4*m*m)
	must(t, r)
	mm := loadFunction(t, l, "matMulTiled")
	must(t, l.LaunchKernel(thread, mm, [3]uint32{m / 16, m / 16, 1}, [3]uint32{16, 16, 1}, 0, 0, paramBuf(pA, pB, pC, uint32(m))))
	C := make([]float32, m*m)
	for row := range m {
		for col := range m {
			var acc float32
			for k := range m {
				acc = acc + float32(A[row*m+k]*B[k*m+col])
			}
			C[row*m+col] = acc
		}
	}
	sameBits(t, "matMulTiled", download(t, l, pC, m*m), C)

	empty := loadFunction(t, l, "empty")
	must(t, l.LaunchKernel(thread, empty, [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, 0, nil))
	must(t, l.CtxSynchronize(thread))

	// What cuLaunchKernel refuses before the device sees it.
	for _, c := range []struct {
		what        string
		grid, block [3]uint32
		shared      uint32
		params      []byte
	}{
		{"a zero grid dimension", [3]uint32{1, 0, 1}, [3]uint32{1, 1, 1}, 0, nil},
		{"1025 threads a block", [3]uint32{1, 1, 1}, [3]uint32{1025, 1, 1}, 0, nil},
		{"grid y 65536", [3]uint32{1, 65536, 1}, [3]uint32{1, 1, 1}, 0, nil},
		{"49 KiB of shared memory", [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 49 << 10, nil},
		{"a parameter buffer for another kernel", [3]uint32{1, 1, 1}, [3]uint32{1, 1, 1}, 0, make([]byte, 8)},
	} {
		want(t, "cuLaunchKernel with "+c.what, l.LaunchKernel(thread, empty, c.grid, c.block, c.shared, 0, c.params), ErrInvalidValue)
	}
	if v, r := l.FuncGetAttribute(funcMaxThreadsPerBlock, vecAdd); r != Success || v != 1024 {
		t.Fatalf("cuFuncGetAttribute(MAX_THREADS_PER_BLOCK) = %d, %v; want 1024", v, r)
	}
	if off, size, r := l.FuncGetParamInfo(scaleAdd, 2); r != Success || off != 16 || size != 4 {
		t.Fatalf("cuFuncGetParamInfo(scaleAdd, 2) = %d, %d, %v; want 16, 4", off, size, r)
	}
	if v, _ := l.DeviceGetAttribute(attrMaxBlockDimZ, 0); v != 64 {
		t.Fatalf("cuDeviceGetAttribute(MAX_BLOCK_DIM_Z) = %d, want 64", v)
	}
}

// TestGridLaunchParamsLive launches scaleAdd many more times than the
// parameter arena holds buffers, each with its own n, without a sync: a
// buffer overwritten before its launch ran would change the sums.
func TestGridLaunchParamsLive(t *testing.T) {
	l := newGridLib(t, Config{})
	const n, launches = 64, 3 * paramSegments * (paramSegmentSize / 32)
	x := inputs(n, 1)
	px := upload(t, l, x)
	py := upload(t, l, make([]float32, n))
	f := loadFunction(t, l, "scaleAdd")
	y := make([]float32, n)
	for i := range launches {
		k := i%n + 1
		must(t, l.LaunchKernel(thread, f, [3]uint32{1, 1, 1}, [3]uint32{n, 1, 1}, 0, 0, paramBuf(px, py, float32(1), uint32(k))))
		for j := range k {
			y[j] = float32(1*x[j]) + y[j]
		}
	}
	sameBits(t, "after the launches", download(t, l, py, n), y)
}

// TestLaunchesBatched: launches are written to the ring without a
// doorbell until launchBatch of them wait (or a call fences), so RING_TAIL
// stays put below that; the LAUNCH path of the CUDA model shows it today.
func TestLaunchesBatched(t *testing.T) {
	l, f, p := scaleLib(t, Config{RingDelay: time.Hour})
	d := l.Driver()
	before := ringTail(t, d)
	for range launchBatch - 1 {
		must(t, l.LaunchKernel(thread, f, [3]uint32{1, 1, 1}, [3]uint32{64, 1, 1}, 0, 0, p))
	}
	if ringTail(t, d) != before {
		t.Fatalf("RING_TAIL moved after %d launches: the doorbell was rung for them", launchBatch-1)
	}
	must(t, l.LaunchKernel(thread, f, [3]uint32{1, 1, 1}, [3]uint32{64, 1, 1}, 0, 0, p))
	if ringTail(t, d) == before {
		t.Fatalf("RING_TAIL did not move after %d launches", launchBatch)
	}
	must(t, l.LaunchKernel(thread, f, [3]uint32{1, 1, 1}, [3]uint32{64, 1, 1}, 0, 0, p))
	must(t, l.CtxSynchronize(thread)) // rings the one left and waits
}

// TestLaunchRungWithoutAnotherCall: a program that launches and then makes
// no call sees its launch rung within RingDelay, by the library's timer.
func TestLaunchRungWithoutAnotherCall(t *testing.T) {
	l, f, p := scaleLib(t, Config{RingDelay: time.Millisecond})
	d := l.Driver()
	before := ringTail(t, d)
	must(t, l.LaunchKernel(thread, f, [3]uint32{1, 1, 1}, [3]uint32{64, 1, 1}, 0, 0, p))
	deadline := time.Now().Add(10 * time.Second)
	for ringTail(t, d) == before { // polling the device register the timer writes
		if time.Now().After(deadline) {
			t.Fatal("RING_TAIL did not move within 10 s of a launch with no call after it")
		}
		time.Sleep(time.Millisecond)
	}
	must(t, l.CtxSynchronize(thread))
}

// scaleLib is a Lib on the CUDA model with the one LAUNCH-convention
// module, scale, loaded, and a parameter buffer that scales 64 words.
func scaleLib(t testing.TB, lc Config) (*Lib, Handle, []byte) {
	t.Helper()
	t.Setenv("GMIG_CUDA_MODEL", "1") // migtest.UseCUDAModel, which takes a *testing.T only
	l := initLibConfig(t, vgpu.Config{Backend: vgpu.BackendCUDA, GuestModules: true}, lc)
	m, r := l.ModuleLoadData(thread, []byte(scalePTX))
	must(t, r)
	f, r := l.ModuleGetFunction(m, "scale")
	must(t, r)
	a, r := l.MemAlloc(thread, 4*64)
	must(t, r)
	off, err := l.Driver().ApertureOffset(a)
	if err != nil {
		t.Fatal(err)
	}
	return l, f, paramBuf(uint64(0), uint64(64), off, uint32(1))
}

func ringTail(t testing.TB, d *guest.Driver) uint32 {
	t.Helper()
	v, err := d.Bus().ReadReg32(abi.RegRingTail)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestCheckGrid(t *testing.T) {
	ok := [3]uint32{1, 1, 1}
	for _, c := range []struct {
		grid, block [3]uint32
		shared      uint32
		want        Result
	}{
		{ok, [3]uint32{1024, 1, 1}, 48 << 10, Success},
		{[3]uint32{1<<31 - 1, 65535, 65535}, [3]uint32{16, 16, 4}, 0, Success},
		{[3]uint32{1 << 31, 1, 1}, ok, 0, ErrInvalidValue},
		{[3]uint32{1, 1, 65536}, ok, 0, ErrInvalidValue},
		{ok, [3]uint32{32, 32, 2}, 0, ErrInvalidValue},
		{ok, [3]uint32{0, 1, 1}, 0, ErrInvalidValue},
		{ok, ok, 48<<10 + 1, ErrInvalidValue},
	} {
		if got := checkGrid(c.grid, c.block, c.shared); got != c.want {
			t.Errorf("checkGrid(%v, %v, %d) = %v, want %v", c.grid, c.block, c.shared, got, c.want)
		}
	}
	if !bytes.Equal(appendLaunchGrid(nil, 3, 7, ok, ok, 0, 0x1000, 28)[:8], guest.AppendHeader(nil, abi.OpLaunchGrid, 3<<abi.CmdStreamShift, abi.CmdLaunchGridSize)) {
		t.Fatal("LAUNCH_GRID's header: want stream 3 in flags bits 8-15")
	}
	if n := len(appendLaunchGrid(nil, 0, 7, ok, ok, 0, 0x1000, 28)); n != abi.CmdLaunchGridSize {
		t.Fatalf("LAUNCH_GRID is %d bytes, want %d", n, abi.CmdLaunchGridSize)
	}
}

// TestLaunchOnItsStream: a launch goes on its stream's device stream id
// (docs/device-abi.md §5.1), so a kernel that faults on a created stream
// leaves that stream in error, not the default one; the synchronize
// reports the launch's CUDA_ERROR_LAUNCH_FAILED, and, the failure being
// sticky for the vGPU's GPU context as CUDA's is, the next launch fails
// too.
func TestLaunchOnItsStream(t *testing.T) {
	l := newGridLib(t, Config{})
	s, r := l.StreamCreate(thread, 0)
	must(t, r)
	const n = 256
	a := inputs(n, 1)
	pa := upload(t, l, a)
	pc, r := l.MemAlloc(thread, 4*n)
	must(t, r)
	vecAdd := loadFunction(t, l, "vecAdd")
	grid, block := [3]uint32{1, 1, 1}, [3]uint32{n, 1, 1}
	// Pointers outside every allocation: the kernel faults.
	must(t, l.LaunchKernel(thread, vecAdd, grid, block, 0, s, paramBuf(uint64(8), uint64(8), uint64(8), uint32(n))))
	id := l.streamIDLocked(s)
	if got := uint8(binary.LittleEndian.Uint16(l.launchBuf[2:]) >> abi.CmdStreamShift); id == 0 || got != id {
		t.Fatalf("LAUNCH_GRID on stream id %d, want the stream's id %d (nonzero)", got, id)
	}
	// Let the device retire it (a fence, FENCE_DONE polled) without the
	// library collecting the errors.
	d := l.Driver()
	l.mu.Lock()
	v, r := l.fenceLocked()
	l.mu.Unlock()
	must(t, r)
	for deadline := time.Now().Add(10 * time.Second); ; {
		done, err := d.FenceDone()
		if err != nil {
			t.Fatal(err)
		}
		if done >= v {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("fence %d did not retire", v)
		}
		time.Sleep(time.Millisecond) // polling a device register
	}
	for _, c := range []struct {
		id   uint8
		want uint32
	}{{0, abi.CudaSuccess}, {id, uint32(ErrLaunchFailed)}} {
		if code, _, err := d.StreamStatus(c.id); err != nil || code != c.want {
			t.Fatalf("STREAM_ERR[%d] = %d (%v), want %d", c.id, code, err, c.want)
		}
	}
	want(t, "cuCtxSynchronize after a faulting launch", l.CtxSynchronize(thread), ErrLaunchFailed)
	// The failure is sticky, as CUDA's is for the context: the stream's
	// next launch fails too (the launch may be queued first; the
	// synchronisation reports it).
	if r := l.LaunchKernel(thread, vecAdd, grid, block, 0, s, paramBuf(pa, pa, pc, uint32(n))); r == Success {
		want(t, "cuCtxSynchronize after a launch on the failed context", l.CtxSynchronize(thread), ErrLaunchFailed)
	} else {
		want(t, "a launch on the failed context", r, ErrLaunchFailed)
	}
	must(t, l.StreamDestroy(s))
}
