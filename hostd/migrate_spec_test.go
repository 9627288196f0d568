package hostd

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/cuda"
	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/mmio"
	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/vgpu"
)

// scaleModule is the guest module "scale" loaded by a guest driver: u32
// at buf+4i *= mul for i < scaleWords, which the model of a GPU plays in Go
// (a GPU would compile the PTX of internal/sim's CUDA tests; the model
// reads only the entry name).
type scaleModule struct {
	d        *guest.Driver
	buf, off uint64 // the words' graphics address and aperture offset
}

const (
	scaleHandle = 7
	scaleWords  = 1024
)

// loadScale loads "scale" through d's ring under scaleHandle and fills
// its words with 0, 1, 2, ...
func loadScale(t *testing.T, d *guest.Driver) *scaleModule {
	t.Helper()
	img := guest.ModuleImage("scale", []byte("// played by the model of a GPU\n"))
	imgGA, err := d.Alloc(uint64(len(img)))
	if err != nil {
		t.Fatal(err)
	}
	m := &scaleModule{d: d}
	if m.buf, err = d.Alloc(4 * scaleWords); err != nil {
		t.Fatal(err)
	}
	if m.off, err = d.ApertureOffset(m.buf); err != nil {
		t.Fatal(err)
	}
	words := make([]byte, 4*scaleWords)
	for i := range scaleWords {
		binary.LittleEndian.PutUint32(words[4*i:], uint32(i))
	}
	if err := d.WriteGA(imgGA, img); err != nil {
		t.Fatal(err)
	}
	if err := d.WriteGA(m.buf, words); err != nil {
		t.Fatal(err)
	}
	if err := d.Submit(guest.AppendKernelLoadModule(nil, scaleHandle, 3, imgGA, uint32(len(img)))); err != nil {
		t.Fatal(err)
	}
	return m
}

// run launches the module with mul and checks that word i is then i*want.
func (m *scaleModule) run(t *testing.T, ctx context.Context, mul, want uint32) {
	t.Helper()
	if err := m.d.Launch(scaleHandle, scaleWords, m.off, uint64(mul)); err != nil {
		t.Fatal(err)
	}
	if err := m.d.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4*scaleWords)
	if err := m.d.ReadGA(m.buf, got); err != nil {
		t.Fatal(err)
	}
	for i := range scaleWords {
		if v := binary.LittleEndian.Uint32(got[4*i:]); v != uint32(i)*want {
			t.Fatalf("word %d = %d, want %d", i, v, uint32(i)*want)
		}
	}
}

// TestLandRefusesWhatItCannotProvide: an arriving vGPU's spec this
// gmigd cannot provide — a back end it does not know or cannot open, CAPS
// its vGPUs do not present, guest modules on a back end without them — is
// refused at Land with the reason, and nothing of it is kept. (It runs
// before TestMigrateCUDAVGPU opens the model of a GPU in this process:
// "cuda without a GPU" needs none opened.)
func TestLandRefusesWhatItCannotProvide(t *testing.T) {
	h := newHost(t)
	caps := uint32(mmio.DefaultCaps)
	via := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)}
	for _, c := range []struct {
		name string
		spec vgpu.Spec
		is   []error // one of them
		says string
	}{
		{"unknown back end", vgpu.Spec{MemSize: 1 << 20, GTTEntries: 1024, Backend: "opencl", Caps: caps},
			[]error{vgpu.ErrSpec}, `back end "opencl"`},
		{"CAPS it does not present", vgpu.Spec{MemSize: 1 << 20, GTTEntries: 1024, Backend: vgpu.BackendSoftware, Caps: caps | 1<<31},
			[]error{vgpu.ErrSpec}, "CAPS 0x80000007"},
		{"guest modules on a back end without them", vgpu.Spec{MemSize: 1 << 20, GTTEntries: 1024, Backend: vgpu.BackendSoftware,
			GuestModules: true, Caps: caps | abi.CapModules}, []error{vgpu.ErrSpec}, "guest modules need"},
		{"cuda without a GPU", vgpu.Spec{MemSize: 1 << 20, GTTEntries: 1024, Backend: vgpu.BackendCUDA, Caps: caps},
			[]error{cuda.ErrNoDriver, cuda.ErrNoDevice}, "cuda back end"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if c.spec.Backend == vgpu.BackendCUDA {
				if _, err := nvidia.OpenGPU(vgpu.GPUOrdinal); err == nil {
					t.Skip("this process has a GPU (or the model of one)")
				}
			}
			_, err := h.Land(context.Background(), orchestrator.Prepare{ID: "m", Name: "vm", VGPU: c.spec, VMKind: KindSim}, via)
			is := false
			for _, e := range c.is {
				is = is || errors.Is(err, e)
			}
			if !is || !strings.Contains(err.Error(), c.says) {
				t.Fatalf("Land = %v, want one of %v saying %q", err, c.is, c.says)
			}
			t.Logf("refused: %v", err)
			if _, err := h.Get("vm"); !errors.Is(err, ErrNotFound) || len(h.Pool().Partitions()) != 0 {
				t.Fatalf("a refused landing kept its vGPU (%v) or partitions %v", err, h.Pool().Partitions())
			}
		})
	}
}

// TestMigrateCUDAVGPU migrates a vGPU on the CUDA back end (the model of
// a GPU, as in CI) with guest modules, whose guest has loaded and run a
// module, between two gmigd through the orchestrator in the middle of a
// workload that checks every step against its reference model: it lands
// there as a CUDA vGPU with guest modules and the CAPS its guest saw, the
// workload ends, and the module runs there under the same handle.
func TestMigrateCUDAVGPU(t *testing.T) {
	migtest.UseCUDAModel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sims := &sim.Registry{}
	a, b := newMigHost(t, ctx, sims, true), newMigHost(t, ctx, sims, false)
	info, err := a.Create(vgpu.Config{Name: "vm", MemSize: 8 << 20, Backend: vgpu.BackendCUDA, GuestModules: true})
	if err != nil {
		t.Fatal(err)
	}
	vm, err := sim.StartVM(info.Socket, testSeed, guest.WorkloadConfig{MemSize: 2 << 20, Check: true}, sim.Options{MSI: true})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	if err := a.AddSimVM("vm", "vm", vm, nil); err != nil {
		t.Fatal(err)
	}
	sims.Put("vm", vm)
	stopBeat := vm.StartHeartbeat(time.Millisecond)
	defer stopBeat()
	caps := vm.Driver().Caps()
	if caps&abi.CapModules == 0 {
		t.Fatalf("the guest saw CAPS %#x, without guest modules", caps)
	}
	mod := loadScale(t, vm.Driver())
	mod.run(t, ctx, 3, 3)

	done := make(chan error, 1)
	go func() { done <- vm.Run(ctx, testSteps) }()
	rep, err := a.MigrateVM(ctx, "vm", b.addr, MigrateOptions{Progress: midWorkload(t, ctx, vm, 60)})
	if err != nil {
		t.Fatalf("migrating a cuda vGPU with guest modules: %v", err)
	}
	if arr := <-b.arrivals; arr.Err != nil {
		t.Fatalf("the destination says %v", arr.Err)
	}
	checkReport(t, rep)
	arrived, err := b.Get("vm")
	if err != nil || arrived.Backend != vgpu.BackendCUDA {
		t.Fatalf("arrived as %+v (%v), want a %s vGPU", arrived, err, vgpu.BackendCUDA)
	}
	b.mu.Lock()
	v := b.vgpus["vm"].v
	b.mu.Unlock()
	var reg [4]byte
	if err := v.ReadRegion(abi.BARRegs, abi.RegCaps, reg[:]); err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint32(reg[:]); got != caps || v.GPU() == nil {
		t.Fatalf("the destination presents CAPS %#x (GPU back end %v), the guest saw %#x", got, v.GPU() != nil, caps)
	}
	vm.Pace(0)
	if err := <-done; err != nil {
		t.Fatalf("workload: %v", err)
	}
	mod.run(t, ctx, 5, 15)
}
