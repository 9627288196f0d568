package orchestrator

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/mmio"
	"github.com/gmig-dev/gmig/precopy"
	"github.com/gmig-dev/gmig/vgpu"
)

// askPrepare sends one Prepare for spec to the destination at addr and
// returns its answer.
func askPrepare(t *testing.T, addr, id string, spec vgpu.Spec) ready {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(guard))
	if err := writeMsg(c, hello{Version: ProtocolVersion, Kind: kindMigrate, ID: id}); err != nil {
		t.Fatal(err)
	}
	if err := writeMsg(c, Prepare{ID: id, Name: "vm", VGPU: spec, VMKind: "sim", Strategy: precopy.OneShot}); err != nil {
		t.Fatal(err)
	}
	var r ready
	if err := readMsg(c, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestPrepareRefusesWhatItCannotProvide: a destination refuses at
// Prepare, saying why in its answer (which the source's error carries), a
// vGPU it cannot provide — a back end it does not have, CAPS it does not
// present, guest modules its back end cannot load, or a vGPU its host
// landed otherwise — and keeps nothing of it. (It runs before any test of
// this process opens the model of a GPU: "cuda without a GPU" needs the
// process to have none.)
func TestPrepareRefusesWhatItCannotProvide(t *testing.T) {
	caps := uint32(mmio.DefaultCaps)
	for i, c := range []struct {
		name     string
		spec     vgpu.Spec
		software bool // the host lands every vGPU on the software back end
		says     string
	}{
		{"unknown back end", vgpu.Spec{MemSize: testMem, GTTEntries: 1024, Backend: "opencl", Caps: caps}, false,
			`back end "opencl"`},
		{"cuda without a GPU", vgpu.Spec{MemSize: testMem, GTTEntries: 1024, Backend: vgpu.BackendCUDA, Caps: caps}, false,
			"cuda back end"},
		{"CAPS it does not present", vgpu.Spec{MemSize: testMem, GTTEntries: 1024, Backend: vgpu.BackendSoftware, Caps: caps | 1<<31}, false,
			"CAPS 0x80000007, a software vGPU here presents 0x7"},
		{"guest modules on a back end without them", vgpu.Spec{MemSize: testMem, GTTEntries: 1024, Backend: vgpu.BackendSoftware,
			GuestModules: true, Caps: caps | abi.CapModules}, false, "guest modules need the \"cuda\" back end"},
		{"a host that lands another vGPU", vgpu.Spec{MemSize: testMem, GTTEntries: 1024, Backend: vgpu.BackendSoftware, Caps: caps}, true,
			""},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := &fakeHost{pool: migtest.NewPool(t, 4*testMem), software: c.software}
			defer h.close()
			_, addr := serveDest(t, h, DestinationOptions{Log: migtest.Log, Timeouts: testTimeouts})
			spec, says := c.spec, c.says
			if c.software {
				// The host lands a software vGPU for a cuda spec; the
				// Destination refuses before it starts a thing.
				spec.Backend, spec.GuestModules, spec.Caps = vgpu.BackendCUDA, true, caps|abi.CapModules
				says = "the vGPU landed here: vgpu: cannot provide the vGPU described: back end cuda (here software), guest modules true (here false), CAPS 0xf (here 0x7)"
			}
			r := askPrepare(t, addr, "000000000000000"+string(rune('a'+i)), spec)
			if c.name == "cuda without a GPU" && r.Error == "" {
				t.Skip("this process has a GPU (or the model of one): cuda lands here")
			}
			if !strings.Contains(r.Error, says) || r.Incoming != "" {
				t.Fatalf("ready %+v, want a refusal saying %q", r, says)
			}
			if parts := h.pool.Partitions(); len(parts) != 0 {
				t.Fatalf("the refusing destination keeps partitions %v", parts)
			}
		})
	}
}

// TestMigrateRefusedSpecRollsBack: a source whose cuda vGPU the
// destination cannot provide (its host lands software vGPUs only) is
// refused at Prepare; its error carries the destination's reason and the
// VM runs on here.
func TestMigrateRefusedSpecRollsBack(t *testing.T) {
	migtest.UseCUDAModel(t)
	ctx, cancel := context.WithTimeout(context.Background(), guard)
	defer cancel()
	v := migtest.NewVGPUConfig(t, migtest.NewPool(t, 2*testMem),
		vgpu.Config{Name: "vm", MemSize: testMem, Backend: vgpu.BackendCUDA, GuestModules: true})
	h := &fakeHost{pool: migtest.NewPool(t, 4*testMem), software: true}
	defer h.close()
	_, addr := serveDest(t, h, DestinationOptions{Log: migtest.Log, Timeouts: testTimeouts})
	vm := newFakeSourceVM(nil)
	_, err := Migrate(ctx, Source{VGPU: v, VM: vm, Peer: addr, VMKind: "sim", Timeouts: testTimeouts, Log: migtest.Log})
	const says = "the destination refused: orchestrator: the vGPU landed here: vgpu: cannot provide the vGPU described: back end cuda (here software)"
	if !errors.Is(err, ErrRolledBack) || !strings.Contains(err.Error(), says) {
		t.Fatalf("Migrate = %v, want a roll-back saying %q", err, says)
	}
	if vm.n("Migrate", false) != 0 || migtest.Quiesced(t, v) {
		t.Fatal("a migration refused at Prepare touched the VM or left the vGPU quiesced")
	}
}
