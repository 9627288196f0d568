package engine

import (
	"bytes"
	_ "embed"
	"errors"
	"strings"
	"testing"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/gtt"
)

// kernels13PTX is the LAUNCH_GRID test kernels' PTX (docs/device-abi.md
// §6.10), which the CUDA model and the guest programs know by entry name;
// embedded, so that a test binary runs from any directory.
//
//go:embed nvidia/testdata/kernels13.ptx
var kernels13PTX []byte

func kernels13(testing.TB) []byte { return kernels13PTX }

// gridCall is one LaunchGrid that reached a back end.
type gridCall struct {
	handle uint32
	grid   Grid
	params []byte
}

// gridRec is what gridBackend saw and what it is told to do.
type gridRec struct {
	launches  []gridCall
	syncs     int
	launchErr error // LaunchGrid's answer
	syncErr   error // the next Sync's answer (once)
	// writeOrder is, for each Write, whether syncErr was still waiting
	// for a Sync when it came.
	writeOrder []bool
}

// gridBackend is the software back end taking guest modules and recording
// LAUNCH_GRID, to test the engine's side without a GPU.
type gridBackend struct {
	Backend
	rec *gridRec
}

func (b gridBackend) LoadModule(uint32, Module) error { return nil }
func (b gridBackend) UnloadModule(uint32) error       { return nil }
func (b gridBackend) LaunchGrid(h uint32, g Grid, p []byte) error {
	if b.rec.launchErr != nil {
		return b.rec.launchErr
	}
	b.rec.launches = append(b.rec.launches, gridCall{h, g, bytes.Clone(p)})
	return nil
}
func (b gridBackend) Write(dst []gtt.Extent, src []byte) error {
	b.rec.writeOrder = append(b.rec.writeOrder, b.rec.syncErr != nil)
	return b.Backend.Write(dst, src)
}
func (b gridBackend) Sync() error {
	b.rec.syncs++
	err := b.rec.syncErr
	b.rec.syncErr = nil
	return err
}

// newGridHarness is a harness with streams on gridBackend, module 5 the
// PTX's vecAdd (28 parameter bytes) and kernel 6 a built-in SAXPY.
func newGridHarness(t *testing.T) (*harness, *gridRec) {
	rec := &gridRec{}
	h := newHarness(t, 71, 4096, func(h *harness, c *Config) {
		c.Streams = true
		c.Backend = gridBackend{Backend: c.Backend, rec: rec}
	})
	img := append(append([]byte("vecAdd"), 0), kernels13(t)...)
	h.write(tDataGA, img)
	h.submit(KernelLoadModule{Handle: 5, Args: 1, Image: tDataGA, Len: uint32(len(img))},
		KernelLoad{Handle: 6, Kind: abi.KernelSaxpy})
	if f := h.ev.takeFaults(); len(f) != 0 {
		t.Fatalf("loading: faults %v (%v)", f, f[0].Err)
	}
	return h, rec
}

// tGridParams is where the tests keep a parameter buffer.
const tGridParams = tDataGA + 32*abi.PageSize

// pushOn pushes c on stream id and returns its ring offset.
func (h *harness) pushOn(id uint32, c Command) uint32 {
	off := h.tail
	b := encode(c)
	le.PutUint16(b[2:], le.Uint16(b[2:])|uint16(id<<abi.CmdStreamShift))
	h.pushBytes(b)
	return off
}

var grid1 = Grid{X: 4, Y: 1, Z: 1, BlockX: 256, BlockY: 1, BlockZ: 1}

// TestLaunchGrid: the parameter buffer read through the GTT reaches the
// back end byte for byte with the grid; the ring draining after launches
// does not wait for them (no Sync), the FENCE does.
func TestLaunchGrid(t *testing.T) {
	h, rec := newGridHarness(t)
	params := make([]byte, 28)
	for i := range params {
		params[i] = byte(0xa0 + i)
	}
	h.write(tGridParams, params)
	g := Grid{X: 7, Y: 2, Z: 3, BlockX: 32, BlockY: 4, BlockZ: 2, SharedBytes: 1024}
	for range 3 {
		h.submit(LaunchGrid{Handle: 5, Grid: g, Params: tGridParams, Len: 28})
	}
	if f := h.ev.takeFaults(); len(f) != 0 {
		t.Fatalf("faults %v (%v)", f, f[0].Err)
	}
	if rec.syncs != 0 {
		t.Errorf("%d back-end syncs after three launches, want none (launches are asynchronous)", rec.syncs)
	}
	h.submit(Fence{Value: 1})
	if rec.syncs != 1 {
		t.Errorf("%d back-end syncs after the fence, want 1", rec.syncs)
	}
	if len(rec.launches) != 3 {
		t.Fatalf("%d launches, want 3", len(rec.launches))
	}
	for _, l := range rec.launches {
		if l.handle != 5 || l.grid != g || !bytes.Equal(l.params, params) {
			t.Fatalf("launch %+v, want module 5 on %+v with %x", l, g, params)
		}
	}
}

// TestLaunchGridRefused: each check of §6.10 is a KERNEL error with its
// stream's CUDA code (a parameter buffer that is not mapped a page fault),
// and nothing reaches the back end.
func TestLaunchGridRefused(t *testing.T) {
	h, rec := newGridHarness(t)
	ok := LaunchGrid{Handle: 5, Grid: grid1, Params: tGridParams, Len: 28}
	with := func(f func(*LaunchGrid)) LaunchGrid { c := ok; f(&c); return c }
	cases := []struct {
		name string
		c    LaunchGrid
		code uint32 // abi.Err*
		cuda uint32
	}{
		{"unknown handle", with(func(c *LaunchGrid) { c.Handle = 8 }), abi.ErrKernel, abi.CudaErrorInvalidHandle},
		{"built-in kernel", with(func(c *LaunchGrid) { c.Handle = 6 }), abi.ErrKernel, abi.CudaErrorInvalidHandle},
		{"grid x 0", with(func(c *LaunchGrid) { c.Grid.X = 0 }), abi.ErrKernel, abi.CudaErrorInvalidValue},
		{"grid z 0", with(func(c *LaunchGrid) { c.Grid.Z = 0 }), abi.ErrKernel, abi.CudaErrorInvalidValue},
		{"block y 0", with(func(c *LaunchGrid) { c.Grid.BlockY = 0 }), abi.ErrKernel, abi.CudaErrorInvalidValue},
		{"block of 2048 threads", with(func(c *LaunchGrid) { c.Grid.BlockX, c.Grid.BlockY, c.Grid.BlockZ = 32, 32, 2 }), abi.ErrKernel, abi.CudaErrorInvalidValue},
		{"block product overflows 32 bits", with(func(c *LaunchGrid) { c.Grid.BlockX, c.Grid.BlockY, c.Grid.BlockZ = 1<<16, 1<<16, 1 }), abi.ErrKernel, abi.CudaErrorInvalidValue},
		{"grid x 2^31", with(func(c *LaunchGrid) { c.Grid.X = 1 << 31 }), abi.ErrKernel, abi.CudaErrorInvalidValue},
		{"grid y 65536", with(func(c *LaunchGrid) { c.Grid.Y = 65536 }), abi.ErrKernel, abi.CudaErrorInvalidValue},
		{"grid z 65536", with(func(c *LaunchGrid) { c.Grid.Z = 65536 }), abi.ErrKernel, abi.CudaErrorInvalidValue},
		{"shared over 48 KiB", with(func(c *LaunchGrid) { c.Grid.SharedBytes = abi.LaunchGridMaxShared + 1 }), abi.ErrKernel, abi.CudaErrorInvalidValue},
		{"buffer over 4096", with(func(c *LaunchGrid) { c.Len = abi.LaunchParamsMax + 4 }), abi.ErrKernel, abi.CudaErrorInvalidValue},
		{"buffer shorter than the layout", with(func(c *LaunchGrid) { c.Len = 24 }), abi.ErrKernel, abi.CudaErrorInvalidValue},
		{"buffer longer than the layout", with(func(c *LaunchGrid) { c.Len = 32 }), abi.ErrKernel, abi.CudaErrorInvalidValue},
		{"buffer range overflows", with(func(c *LaunchGrid) { c.Params = ^uint64(0) - 3 }), abi.ErrKernel, abi.CudaErrorInvalidValue},
		{"buffer unmapped", with(func(c *LaunchGrid) { c.Params = tUnmapped }), abi.ErrPageFault, abi.CudaErrorIllegalAddress},
	}
	for i, tc := range cases {
		id := uint32(i + 1)
		off := h.pushOn(id, tc.c)
		h.pushOn(id, Fence{Value: uint64(id)})
		h.doorbell()
		h.wait()
		f := h.ev.takeFaults()
		if len(f) != 1 || f[0].Code != tc.code || f[0].Opcode != abi.OpLaunchGrid || f[0].RingOffset != off {
			t.Errorf("%s: faults %+v, want one %#x at ring offset %d", tc.name, f, tc.code, off)
			continue
		}
		if tc.code == abi.ErrKernel && !errors.Is(f[0].Err, ErrBadKernel) {
			t.Errorf("%s: %v does not wrap ErrBadKernel", tc.name, f[0].Err)
		}
		if code, fence := h.e.Stream(id); code != tc.cuda || fence != uint64(id) {
			t.Errorf("%s: stream %d has code %d, fence %d; want %d, %d", tc.name, id, code, fence, tc.cuda, id)
		}
	}
	rec.launchErr = errors.New("device refused")
	h.pushOn(99, ok)
	h.doorbell()
	h.wait()
	if f := h.ev.takeFaults(); len(f) != 1 || f[0].Code != abi.ErrKernel {
		t.Errorf("back end refusal: faults %+v, want one KERNEL", f)
	}
	if code, _ := h.e.Stream(99); code != abi.CudaErrorLaunchFailed {
		t.Errorf("back end refusal: stream code %d, want %d", code, abi.CudaErrorLaunchFailed)
	}
	if len(rec.launches) != 0 {
		t.Errorf("refused launches reached the back end: %+v", rec.launches)
	}
}

// TestLaunchGridFailsAtSync: a kernel that fails after its launch retired
// is reported when the FENCE's sync finds it: a KERNEL fault at the
// launch's ring offset, CUDA_ERROR_LAUNCH_FAILED on the launch's stream
// (not the fence's), and the fence still retires.
func TestLaunchGridFailsAtSync(t *testing.T) {
	h, rec := newGridHarness(t)
	h.write(tGridParams, make([]byte, 28))
	c := LaunchGrid{Handle: 5, Grid: grid1, Params: tGridParams, Len: 28}
	h.pushOn(3, c)
	off := h.pushOn(4, c)
	h.doorbell()
	h.wait()
	if f := h.ev.takeFaults(); len(f) != 0 {
		t.Fatalf("faults at launch %+v", f)
	}
	rec.syncErr = errors.Join(errors.New("nvidia: kernel fault"), ErrLaunchFailed)
	h.submit(Fence{Value: 9})
	f := h.ev.takeFaults()
	if len(f) != 1 || f[0].Code != abi.ErrKernel || f[0].Opcode != abi.OpLaunchGrid || f[0].RingOffset != off ||
		!errors.Is(f[0].Err, ErrLaunchFailed) {
		t.Fatalf("faults %+v, want one KERNEL of LAUNCH_GRID at ring offset %d", f, off)
	}
	if code, _ := h.e.Stream(4); code != abi.CudaErrorLaunchFailed {
		t.Errorf("launch's stream code %d, want %d", code, abi.CudaErrorLaunchFailed)
	}
	if code, fence := h.e.Stream(0); code != 0 || fence != 9 {
		t.Errorf("fence's stream: code %d fence %d, want 0 and 9", code, fence)
	}
	if r := h.e.Regs(); r.FenceDone != 9 {
		t.Errorf("FENCE_DONE %d, want 9", r.FenceDone)
	}
}

// TestFenceWriteMemAfterSync: a FENCE with WRITE_MEM writes its value
// only after the Sync that finds an earlier kernel's failure (§6.4,
// §6.10): a guest that polls the value rather than FENCE_DONE must find
// the failure already in ERR_STATUS. (The engine used to write first and
// sync after; a back end that stores the value in host memory at once,
// as the NVIDIA one does into the aperture, then showed the fence retired
// while the kernels still ran.)
func TestFenceWriteMemAfterSync(t *testing.T) {
	h, rec := newGridHarness(t)
	h.write(tGridParams, make([]byte, 28))
	h.submit(LaunchGrid{Handle: 5, Grid: grid1, Params: tGridParams, Len: 28})
	rec.syncErr = errors.Join(errors.New("nvidia: kernel fault"), ErrLaunchFailed)
	rec.writeOrder, rec.syncs = nil, 0
	slot := uint64(tDataGA + 40*abi.PageSize)
	h.submit(Fence{Value: 7, Addr: slot, WriteMem: true})
	if rec.syncs != 2 {
		t.Errorf("%d back-end syncs for a WRITE_MEM fence that drains the ring, want 2 (before its write and after)", rec.syncs)
	}
	if f := h.ev.takeFaults(); len(f) != 1 || f[0].Code != abi.ErrKernel {
		t.Fatalf("faults %+v, want the kernel's", f)
	}
	if len(rec.writeOrder) != 1 || rec.writeOrder[0] {
		t.Fatalf("the fence's write came before the Sync that found the failure (writes %v: true is before)", rec.writeOrder)
	}
	if v := le.Uint64(h.read(slot, 8)); v != 7 {
		t.Fatalf("fence slot holds %d, want 7", v)
	}
}

// TestLaunchGridLayoutCached: the PTX is read once per module for
// LAUNCH_GRID and LAUNCH_PARAMS alike, and a module unloaded and replaced
// under the same handle gets its own layout.
func TestLaunchGridLayoutCached(t *testing.T) {
	h, rec := newGridHarness(t)
	h.write(tGridParams, make([]byte, 28))
	if len(h.e.layouts) != 0 {
		t.Fatalf("layouts cached before any launch: %v", h.e.layouts)
	}
	h.submit(LaunchGrid{Handle: 5, Grid: grid1, Params: tGridParams, Len: 28}, Fence{Value: 1})
	if l, ok := h.e.layouts[5]; !ok || l.size != 28 || l.err != nil {
		t.Fatalf("module 5's layout %+v (cached %v), want 28 bytes", l, ok)
	}
	img := append(append([]byte("scaleAdd"), 0), kernels13(t)...)
	h.write(tDataGA, img)
	h.submit(KernelUnload{Handle: 5})
	if _, ok := h.e.layouts[5]; ok {
		t.Fatal("an unloaded module's layout is still cached")
	}
	h.submit(KernelLoadModule{Handle: 5, Args: 1, Image: tDataGA, Len: uint32(len(img))})
	h.pushOn(1, LaunchParams{Handle: 5, Threads: 1, Params: tGridParams, Len: 24}) // stream 1: the failure stops it
	h.pushOn(2, LaunchGrid{Handle: 5, Grid: grid1, Params: tGridParams, Len: 24})
	h.pushOn(3, LaunchGrid{Handle: 5, Grid: grid1, Params: tGridParams, Len: 28})
	h.submit(Fence{Value: 2})
	f := h.ev.takeFaults()
	if len(f) != 2 || f[0].Opcode != abi.OpLaunchParams || f[1].Opcode != abi.OpLaunchGrid || f[1].Code != abi.ErrKernel ||
		!strings.Contains(f[1].Err.Error(), "take 24 bytes") {
		t.Fatalf("faults %+v, want LAUNCH_PARAMS refused by the software back end and the 28-byte LAUNCH_GRID by scaleAdd's 24-byte layout", f)
	}
	if code, _ := h.e.Stream(1); code != abi.CudaErrorLaunchFailed {
		t.Errorf("LAUNCH_PARAMS the back end cannot run: stream code %d, want %d (§6.9)", code, abi.CudaErrorLaunchFailed)
	}
	if l := h.e.layouts[5]; l.size != 24 {
		t.Errorf("scaleAdd's cached layout %+v, want 24 bytes", l)
	}
	if len(rec.launches) != 2 {
		t.Errorf("%d launches, want 2", len(rec.launches))
	}
}

// TestLaunchGridSoftware: the software back end runs no modules: a
// LAUNCH_GRID is a KERNEL error, and the back end itself says why.
func TestLaunchGridSoftware(t *testing.T) {
	h := newHarness(t, 72, 4096)
	h.write(tGridParams, make([]byte, 28))
	h.submit(LaunchGrid{Handle: 1, Grid: grid1, Params: tGridParams, Len: 28}, Fence{Value: 1})
	if f := h.ev.takeFaults(); len(f) != 1 || f[0].Code != abi.ErrKernel {
		t.Fatalf("faults %+v, want one KERNEL", f)
	}
	err := NewSoftware(make([]byte, abi.PageSize)).LaunchGrid(1, grid1, nil)
	if !errors.Is(err, ErrNoModules) || !strings.Contains(err.Error(), "runs no modules") {
		t.Fatalf("software LaunchGrid: %v, want ErrNoModules saying it runs no modules", err)
	}
}
