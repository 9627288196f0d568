//go:build cuda

package sim

// The correctness suite and the seeded workload on the CUDA back end
// (docs/nvidia.md): built with -tags cuda; each test skips, saying why,
// without a driver or GPU. GMIG_CUDA_PTX names a freshly built
// kernels.ptx to use instead of the embedded one.

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/cuda"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/precopy"
	"github.com/gmig-dev/gmig/vgpu"
)

func TestMain(m *testing.M) {
	if err := nvidia.KernelsFromEnv(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// serveBackend is serve for a vGPU on the given back end; it skips the
// test when that is CUDA and there is no GPU.
func serveBackend(t *testing.T, p *pool.Pool, name string, memSize uint64, backend string) *device {
	t.Helper()
	v, err := vgpu.New(vgpu.Config{Name: name, MemSize: memSize, Backend: backend}, p, zerolog.Nop())
	if errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice) {
		t.Skipf("no NVIDIA GPU here: %v", err)
	}
	if err != nil {
		t.Fatalf("vgpu.New: %v", err)
	}
	return serveVGPU(t, v)
}

// TestSuiteCUDA runs the full correctness suite on the CUDA back end, in
// the interrupt configurations TestSuite uses.
func TestSuiteCUDA(t *testing.T) {
	cases := []struct {
		name string
		sim  Options
		drv  guest.Options
	}{
		{"poll", Options{NoIRQ: true}, guest.Options{Seed: 1}},
		{"intx-irq", Options{}, guest.Options{Seed: 3, UseIRQ: true}},
		{"msi-irq", Options{MSI: true}, guest.Options{Seed: 4, UseIRQ: true}},
		{"small-ring-per-entry-gtt", Options{GTTPerEntry: true}, guest.Options{Seed: 5, UseIRQ: true, RingSize: 4096}},
	}
	p := newPool(t, 256<<20)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dev := serveBackend(t, p, "c-"+c.name, 16<<20, vgpu.BackendCUDA)
			d := open(t, attach(t, dev, c.sim), c.drv)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r := guest.Suite(ctx, d)
			t.Logf("suite over %s on the CUDA back end:\n%s", c.name, r)
			if !r.OK() {
				t.Fatalf("%d checks failed", len(r.Failed()))
			}
			st := dev.v.GPU().Stats()
			t.Logf("back end: %d ops, %d B read from the window, %d B written back", st.Commands, st.HostReadBytes, st.WriteBackBytes)
		})
	}
}

// TestWorkloadDigestCUDA runs one seeded workload (its reference model
// checking every step) on the software and on the CUDA back end: the
// graphics-memory digests are equal.
func TestWorkloadDigestCUDA(t *testing.T) {
	p := newPool(t, 128<<20)
	var sums [2][32]byte
	for i, be := range []string{vgpu.BackendSoftware, vgpu.BackendCUDA} {
		d := open(t, attach(t, serveBackend(t, p, "wd-"+be, 16<<20, be), Options{MSI: true}), guest.Options{Seed: 21, UseIRQ: true})
		w := newWorkload(t, 77, true)
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		start := time.Now()
		if err := w.Run(ctx, d, workloadSteps); err != nil {
			cancel()
			t.Fatalf("%s: %v", be, err)
		}
		cancel()
		sums[i] = digest(t, w, d)
		t.Logf("%s: %d steps in %s, digest %x, ops %v", be, w.Steps(), time.Since(start).Round(time.Millisecond), sums[i][:8], w.OpCounts())
	}
	if sums[0] != sums[1] {
		t.Fatalf("digests differ: software %x, cuda %x", sums[0], sums[1])
	}
}

// scalePTX is a guest module: u32 at base+off+4i *= mul for i < threads
// (the device model runs "scale" in Go; a GPU compiles this PTX).
const scalePTX = `.version 7.0
.target sm_80
.address_size 64

.visible .entry scale(
	.param .u64 base,
	.param .u64 threads,
	.param .u64 off,
	.param .u64 mul
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<12>;

	ld.param.u64 %rd1, [base];
	ld.param.u64 %rd2, [threads];
	ld.param.u64 %rd3, [off];
	ld.param.u64 %rd4, [mul];
	mov.u32 %r1, %ctaid.x;
	mov.u32 %r2, %ntid.x;
	mov.u32 %r3, %tid.x;
	mul.wide.u32 %rd5, %r1, %r2;
	cvt.u64.u32 %rd6, %r3;
	add.u64 %rd7, %rd5, %rd6;
	setp.ge.u64 %p1, %rd7, %rd2;
	@%p1 bra DONE;
	shl.b64 %rd8, %rd7, 2;
	add.u64 %rd9, %rd1, %rd3;
	add.u64 %rd10, %rd9, %rd8;
	ld.global.u32 %r4, [%rd10];
	cvt.u32.u64 %r5, %rd4;
	mul.lo.u32 %r6, %r4, %r5;
	st.global.u32 [%rd10], %r6;
DONE:
	ret;
}
`

// TestGuestModuleMigrationCUDA loads a guest module through the ring,
// runs it, migrates the vGPU to another CUDA vGPU (another pool: another
// placement and device mirror) and runs the module again there under the
// same handle: the API log carried the load, the engine state the image.
func TestGuestModuleMigrationCUDA(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	newV := func(p *pool.Pool, name string) (*vgpu.VGPU, string) {
		v, err := vgpu.New(vgpu.Config{Name: name, MemSize: 16 << 20, Backend: vgpu.BackendCUDA, GuestModules: true}, p, zerolog.Nop())
		if errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice) {
			t.Skipf("no NVIDIA GPU here: %v", err)
		}
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { v.Close() })
		path := filepath.Join(t.TempDir(), name+".sock")
		l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
		if err != nil {
			t.Fatal(err)
		}
		sctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- v.Serve(sctx, l) }()
		t.Cleanup(func() { stop(); <-done; l.Close() })
		return v, path
	}
	srcPool, dstPool := newPool(t, 64<<20), newPool(t, 64<<20)
	if _, err := vgpu.New(vgpu.Config{Name: "neighbour", MemSize: 1 << 20}, dstPool, zerolog.Nop()); err != nil {
		t.Fatal(err)
	}
	src, srcPath := newV(srcPool, "mod")
	dst, dstPath := newV(dstPool, "mod")
	bus := attach(t, &device{v: src, path: srcPath}, Options{MSI: true})
	d := open(t, bus, guest.Options{Seed: 9, UseIRQ: true})
	if d.Caps()&abi.CapModules == 0 {
		t.Fatalf("CAPS %#x without guest modules", d.Caps())
	}
	img := guest.ModuleImage("scale", []byte(scalePTX))
	imgGA, err := d.Alloc(uint64(len(img)))
	if err != nil {
		t.Fatal(err)
	}
	buf, err := d.Alloc(4096)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.WriteGA(imgGA, img); err != nil {
		t.Fatal(err)
	}
	words := make([]byte, 4096)
	for i := range 1024 {
		binary.LittleEndian.PutUint32(words[4*i:], uint32(i))
	}
	if err := d.WriteGA(buf, words); err != nil {
		t.Fatal(err)
	}
	off, err := d.ApertureOffset(buf)
	if err != nil {
		t.Fatal(err)
	}
	check := func(mul uint32) {
		t.Helper()
		if err := d.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, 4096)
		if err := d.ReadGA(buf, got); err != nil {
			t.Fatal(err)
		}
		for i := range 1024 {
			if v := binary.LittleEndian.Uint32(got[4*i:]); v != uint32(i)*mul {
				t.Fatalf("word %d = %d, want %d", i, v, uint32(i)*mul)
			}
		}
	}
	if err := d.Submit(guest.AppendKernelLoadModule(nil, 7, 3, imgGA, uint32(len(img)))); err != nil {
		t.Fatal(err)
	}
	if err := d.Launch(7, 1024, off, 3); err != nil {
		t.Fatal(err)
	}
	check(3)

	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	recv := make(chan error, 1)
	go func() {
		_, err := precopy.Receive(ctx, b, dst, precopy.Options{})
		recv <- err
	}()
	s, err := precopy.NewSource(src, a, precopy.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Precopy(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-recv; err != nil {
		t.Fatal(err)
	}
	s.Close()
	bus2, err := Attach(dstPath, Options{MSI: true, RAM: bus.RAMFile()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bus2.Close() })
	if err := d.Rebind(bus2); err != nil {
		t.Fatal(err)
	}
	dst.Resume()
	t.Logf("mirror: source at %#x, destination at %#x", src.GPU().MirrorBase(), dst.GPU().MirrorBase())
	if err := d.Launch(7, 1024, off, 5); err != nil {
		t.Fatal(err)
	}
	check(15)
}
