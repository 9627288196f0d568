package sim

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/vgpu"
)

// The hostile program's kernel attack (guest.AttackKernel) on CUDA vGPUs
// of the CUDA model (nvidia.ModelEnv) with device-local memory and guest
// modules, beside a victim that holds bytes in its own local memory.

const (
	kernelVGPUMem  = 4 << 20
	kernelLocalMem = 8 << 20
	victimBytes    = 64 << 10
)

// cudaConfig is a CUDA vGPU with guest modules and local memory in GPU
// isolation iso.
func cudaConfig(iso string) vgpu.Config {
	return vgpu.Config{MemSize: kernelVGPUMem, LocalMemSize: kernelLocalMem,
		GTTEntries: (kernelVGPUMem + kernelLocalMem) / abi.PageSize,
		Backend:    vgpu.BackendCUDA, GuestModules: true, GPUIsolation: iso}
}

// serveCUDA serves a CUDA vGPU with guest modules and local memory in
// GPU isolation iso until the test ends.
func serveCUDA(t *testing.T, p *pool.Pool, name, iso string) *device {
	t.Helper()
	cfg := cudaConfig(iso)
	cfg.Name = name
	return serveConfig(t, p, cfg)
}

// serveConfig serves a vGPU of cfg until the test ends.
func serveConfig(t *testing.T, p *pool.Pool, cfg vgpu.Config) *device {
	t.Helper()
	v, err := vgpu.New(cfg, p, zerolog.Nop())
	if err != nil {
		t.Fatalf("vgpu.New: %v", err)
	}
	return serveVGPU(t, v)
}

// kernelVictim fills victimBytes of its local memory and returns a
// function that reads them back (nil error: the bytes it read).
func kernelVictim(ctx context.Context, t *testing.T, d *guest.Driver) (want []byte, read func() ([]byte, error)) {
	t.Helper()
	off, err := d.AllocDevice(victimBytes)
	if err != nil {
		t.Fatal(err)
	}
	base, err := d.Bus().ReadReg64(abi.RegDeviceAddrBase)
	if err != nil {
		t.Fatal(err)
	}
	back, err := d.Alloc(victimBytes)
	if err != nil {
		t.Fatal(err)
	}
	want = make([]byte, victimBytes)
	guest.RefFill(want, 0, victimBytes, 0x76696374) // "vict"
	if err := d.Fill(base+off, victimBytes, 0x76696374); err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	return want, func() ([]byte, error) {
		if err := d.Copy(back, base+off, victimBytes); err != nil {
			return nil, err
		}
		if err := d.Sync(ctx); err != nil {
			return nil, err
		}
		got := make([]byte, victimBytes)
		return got, d.ReadGA(back, got)
	}
}

// kernelAttack runs two steps of the kernel attack on a vGPU of isolation
// iso beside a victim of the same isolation; it returns the attacker's
// stats, the first step's error and the victim's read-back.
func kernelAttack(t *testing.T, iso string) (guest.HostileStats, error, []byte, []byte, error) {
	t.Setenv(nvidia.ModelEnv, "1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p := newPool(t, 4*(kernelVGPUMem+kernelLocalMem))
	att, vic := serveCUDA(t, p, "attacker", iso), serveCUDA(t, p, "victim", iso)
	vd := open(t, attach(t, vic, Options{NoIRQ: true}), guest.Options{Seed: 2})
	want, read := kernelVictim(ctx, t, vd)
	ad := open(t, attach(t, att, Options{NoIRQ: true}), guest.Options{Seed: 1})
	h, err := guest.NewHostile(ad, guest.HostileConfig{Seed: 1, Attacks: []guest.Attack{guest.AttackKernel}})
	if err != nil {
		t.Fatal(err)
	}
	serr := h.Step(ctx)
	if err := h.Step(ctx); err != nil && serr == nil {
		serr = err
	}
	got, rerr := read()
	return h.Stats(), serr, got, want, rerr
}

// TestHostileKernelContainedByWorkers: with a GPU worker per vGPU
// (isolation "process") every launch outside the attacker's own local
// memory is refused (the first faults its context, the rest meet the
// failed context), its own scribble lands, and the victim's bytes are
// unchanged and its commands still run.
func TestHostileKernelContainedByWorkers(t *testing.T) {
	st, err, got, want, rerr := kernelAttack(t, vgpu.IsolationProcess)
	if err != nil {
		t.Fatalf("the kernel attack: %v", err)
	}
	t.Logf("kernel attack: %d attempts, %d refused", st.Attempts, st.Refused)
	if st.Failures != 0 || st.Attempts < 65536 || st.Refused != st.Attempts {
		t.Errorf("stats %+v", st)
	}
	if rerr != nil {
		t.Fatalf("the victim after the attack: %v", rerr)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the victim's local memory changed under the attacker's kernel")
	}
}

// TestHostileKernelSharedContext: in one CUDA context (isolation
// "shared") the attacker's first faulting kernel fails the victim's
// context too: the hazard the workers remove, seen from the victim.
func TestHostileKernelSharedContext(t *testing.T) {
	_, _, _, _, rerr := kernelAttack(t, vgpu.IsolationShared)
	var de *guest.DeviceError
	if !errors.As(rerr, &de) {
		t.Fatalf("the victim's device work after the attacker's fault in a shared context: %v, want a device error", rerr)
	}
}

// TestHostileAllAttacks: the whole hostile program ("all": the six attacks
// every vGPU takes, then, where CAPS admits guest grids at device
// addresses, the kernel attack) twice over, on a software vGPU, on one
// with device-local memory (and so streams, CAPS bit 5), and on a CUDA vGPU
// in a GPU worker: every attempt is
// refused. On a device with streams a refused command also stops its
// stream until the guest clears the stream's error (docs/device-abi.md
// §5.1); before the hostile program cleared it, every attempt after the
// first on such a device was skipped, not refused, and the FILL that
// checks the vGPU still serves did not land.
func TestHostileAllAttacks(t *testing.T) {
	for _, c := range []struct {
		name   string
		cfg    vgpu.Config
		kernel bool // the kernel attack is among "all"
	}{
		{"software", vgpu.Config{MemSize: kernelVGPUMem}, false},
		{"software-local", vgpu.Config{MemSize: kernelVGPUMem, LocalMemSize: kernelLocalMem}, false},
		{"cuda-process", cudaConfig(vgpu.IsolationProcess), true},
		// Not "shared": the kernel attack fails the context all shared
		// vGPUs of this process share, for good, as it would gmigd's
		// (TestHostileKernelSharedContext shows it).
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Setenv(nvidia.ModelEnv, "1")
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			c.cfg.Name = "attacker"
			att := serveConfig(t, newPool(t, 2*(kernelVGPUMem+kernelLocalMem)), c.cfg)
			ad := open(t, attach(t, att, Options{MSI: true}), guest.Options{Seed: 1, UseIRQ: true})
			h, err := guest.NewHostile(ad, guest.HostileConfig{Seed: 1})
			if err != nil {
				t.Fatal(err)
			}
			attacks := guest.AttacksFor(ad.Caps())
			if got := attacks[len(attacks)-1] == guest.AttackKernel; got != c.kernel {
				t.Fatalf("attacks %v on CAPS %#x: the kernel attack among them %v, want %v", attacks, ad.Caps(), got, c.kernel)
			}
			for i := range 2 * len(attacks) {
				if err := h.Step(ctx); err != nil {
					t.Errorf("step %d: %v", i, err)
				}
			}
			st := h.Stats()
			t.Logf("hostile program: %d steps %v, %d attempts, %d refused", st.Steps, st.ByAttack, st.Attempts, st.Refused)
			if st.Failures != 0 || st.Refused != st.Attempts || st.Attempts == 0 {
				t.Errorf("stats %+v", st)
			}
		})
	}
}
