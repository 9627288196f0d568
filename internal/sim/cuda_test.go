//go:build cuda

package sim

// The correctness suite and the seeded workload on the CUDA back end
// (docs/nvidia.md): built with -tags cuda; each test skips, saying why,
// without a driver or GPU. GMIG_CUDA_PTX names a freshly built
// kernels.ptx to use instead of the embedded one.

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/cuda"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/internal/vgpu"
)

func TestMain(m *testing.M) {
	if p := os.Getenv("GMIG_CUDA_PTX"); p != "" {
		b, err := os.ReadFile(p)
		if err != nil {
			panic(err)
		}
		engine.SetKernelsPTX(b)
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
	path := filepath.Join(t.TempDir(), name+".sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- v.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		<-done
		l.Close()
		v.Close()
	})
	return &device{v: v, path: path}
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
