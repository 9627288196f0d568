package vgpu

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/internal/cuda"
)

// TestBackendConfig checks the back-end fields of a Config: unknown back
// ends and guest modules without cuda are refused.
func TestBackendConfig(t *testing.T) {
	p := newPool(t, 8<<20)
	for _, c := range []Config{
		{Name: "x", MemSize: 1 << 20, Backend: "opencl"},
		{Name: "y", MemSize: 1 << 20, GuestModules: true},
		{Name: "z", MemSize: 1 << 20, Backend: BackendSoftware, GuestModules: true},
	} {
		if _, err := New(c, p, zerolog.Nop()); !errors.Is(err, ErrConfig) {
			t.Errorf("New(%+v) = %v, want ErrConfig", c, err)
		}
	}
	v, err := New(Config{Name: "sw", MemSize: 1 << 20}, p, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	if v.Config().Backend != BackendSoftware || v.GPU() != nil {
		t.Fatalf("default back end %q, GPU %v", v.Config().Backend, v.GPU())
	}
}

// TestBackendCUDA creates a cuda vGPU: without a GPU that fails saying so
// (a normal state, not a crash); on the model of a GPU (GMIG_CUDA_MODEL=1)
// it works, and CAPS announces guest modules only when they are on.
func TestBackendCUDA(t *testing.T) {
	p := newPool(t, 8<<20)
	_, err := New(Config{Name: "nogpu", MemSize: 1 << 20, Backend: BackendCUDA}, p, zerolog.Nop())
	switch {
	case err == nil:
		t.Log("this machine has a GPU")
	case errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice):
		t.Logf("no GPU: %v", err)
	default:
		t.Fatalf("New cuda without a GPU: %v, want ErrNoDriver or ErrNoDevice", err)
	}
	if len(p.Partitions()) != 0 && err != nil {
		t.Fatal("a failed New kept its partition")
	}
	if err != nil {
		t.Setenv("GMIG_CUDA_MODEL", "1")
	}
	for _, modules := range []bool{false, true} {
		v, err := New(Config{Name: "gpu", MemSize: 1 << 20, Backend: BackendCUDA, GuestModules: modules}, p, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		if v.GPU() == nil {
			t.Fatal("cuda vGPU without a GPU back end")
		}
		var b [4]byte
		if err := v.ReadRegion(abi.BARRegs, abi.RegCaps, b[:]); err != nil {
			t.Fatal(err)
		}
		if got := binary.LittleEndian.Uint32(b[:])&abi.CapModules != 0; got != modules {
			t.Errorf("guest modules %v: CAPS %#x", modules, binary.LittleEndian.Uint32(b[:]))
		}
		if err := v.Close(); err != nil {
			t.Fatal(err)
		}
	}
}
