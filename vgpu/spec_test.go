package vgpu

import (
	"bytes"
	"encoding/gob"
	"errors"
	"reflect"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/gtt"
	"github.com/gmig-dev/gmig/internal/pci"
	"github.com/gmig-dev/gmig/mmio"
)

// useCUDA makes the cuda back end available to this test: GPU 0 where
// there is one, the model of a GPU (GMIG_CUDA_MODEL=1) elsewhere.
func useCUDA(t *testing.T) {
	if _, err := nvidia.OpenGPU(GPUOrdinal); err != nil {
		t.Setenv("GMIG_CUDA_MODEL", "1")
	}
}

// TestSpecRoundTrip: a vGPU's Spec, made into a Config and created,
// gives a vGPU of the same Spec whose CAPS register is the Spec's, for
// each back end, with and without guest modules.
func TestSpecRoundTrip(t *testing.T) {
	useCUDA(t)
	p := newPool(t, 16<<20)
	for _, c := range []Config{
		{Name: "sw", MemSize: 1 << 20},
		{Name: "cuda", MemSize: 2 << 20, GTTEntries: 512, Backend: BackendCUDA},
		{Name: "mods", MemSize: 1 << 20, Backend: BackendCUDA, GuestModules: true},
	} {
		v, err := New(c, p, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		s := v.Spec()
		if got := read32(t, v, abi.BARRegs, abi.RegCaps); got != s.Caps {
			t.Errorf("%s: CAPS register %#x, spec %#x", c.Name, got, s.Caps)
		}
		if want := c.GuestModules; (s.Caps&abi.CapModules != 0) != want {
			t.Errorf("%s: spec CAPS %#x, guest modules %v", c.Name, s.Caps, want)
		}
		cfg, err := s.Config(c.Name + "2")
		if err != nil {
			t.Fatalf("%s: %+v.Config: %v", c.Name, s, err)
		}
		w, err := New(cfg, p, zerolog.Nop())
		if err != nil {
			t.Fatal(err)
		}
		if w.Spec() != s || w.Is(s) != nil || w.Name() != c.Name+"2" {
			t.Errorf("%s: created from its spec %+v: %+v (%v)", c.Name, s, w.Spec(), w.Is(s))
		}
		w.Close()
		v.Close()
	}
}

// TestSpecRefusals: a Spec this gmigd cannot provide is refused with
// ErrSpec saying why, before anything is created.
func TestSpecRefusals(t *testing.T) {
	good := Spec{MemSize: 1 << 20, GTTEntries: 1024, Backend: BackendCUDA, GuestModules: true,
		Caps: mmio.DefaultCaps | abi.CapModules}
	if _, err := good.Config("ok"); err != nil {
		t.Fatalf("%+v refused: %v", good, err)
	}
	for _, c := range []struct {
		name   string
		change func(*Spec)
		says   string
	}{
		{"no size", func(s *Spec) { s.MemSize = 0 }, "incomplete"},
		{"no back end", func(s *Spec) { s.Backend = "" }, "incomplete"},
		{"size not a power of two", func(s *Spec) { s.MemSize = 3 << 20 }, "power of two"},
		{"unknown back end", func(s *Spec) { s.Backend = "opencl" }, `back end "opencl"`},
		{"guest modules on software", func(s *Spec) { s.Backend = BackendSoftware }, "guest modules need"},
		{"a CAPS bit this gmig does not know", func(s *Spec) { s.Caps |= 1 << 31 }, "CAPS 0x8000000f"},
		{"CAPS without the modules the spec has", func(s *Spec) { s.Caps &^= abi.CapModules }, "presents 0xf"},
		{"CAPS with modules the spec has not", func(s *Spec) { s.GuestModules = false }, "CAPS 0xf, a cuda vGPU here presents 0x7"},
	} {
		s := good
		c.change(&s)
		_, err := s.Config("x")
		if !errors.Is(err, ErrSpec) || !strings.Contains(err.Error(), c.says) {
			t.Errorf("%s: %+v.Config = %v, want ErrSpec saying %q", c.name, s, err, c.says)
		}
	}
}

// TestIsNamesDifferences: a vGPU that is not the one a Spec describes is
// told with every difference named.
func TestIsNamesDifferences(t *testing.T) {
	v := newVGPU(t, newPool(t, 4<<20), "v", 1<<20)
	s := v.Spec()
	s.Backend, s.GuestModules, s.Caps = BackendCUDA, true, s.Caps|abi.CapModules
	err := v.Is(s)
	if !errors.Is(err, ErrSpec) {
		t.Fatalf("Is = %v, want ErrSpec", err)
	}
	for _, want := range []string{"back end cuda (here software)", "guest modules true (here false)", "CAPS 0xf (here 0x7)"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "memory size") {
		t.Errorf("%q names a field that does not differ", err)
	}
}

// stateV1Layout is State as StateVersion 1 had it: the vGPU described by
// its memory size and GTT entries alone.
type stateV1Layout struct {
	Version    uint32
	MemSize    uint64
	GTTEntries uint32
	PCI        pci.State
	Regs       mmio.State
	GTT        gtt.State
	Engine     engine.State
}

// TestStateVersions: a version 2 state, gob-encoded as a migration sends
// it, restores; a version 1 one (which cannot say the back end or CAPS)
// decodes but is refused, saying so, and changes nothing.
func TestStateVersions(t *testing.T) {
	v := newVGPU(t, newPool(t, 4<<20), "v", 1<<20)
	program(t, v)
	v.Quiesce()
	defer v.Resume()
	good, err := v.Save()
	if err != nil {
		t.Fatal(err)
	}
	if good.Version != 2 || good.Spec != v.Spec() {
		t.Fatalf("saved version %d with spec %+v, want 2 and %+v", good.Version, good.Spec, v.Spec())
	}
	decode := func(x any) State {
		var b bytes.Buffer
		if err := gob.NewEncoder(&b).Encode(x); err != nil {
			t.Fatal(err)
		}
		var s State
		if err := gob.NewDecoder(&b).Decode(&s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	if err := v.Restore(decode(good)); err != nil {
		t.Fatalf("restoring a version 2 state: %v", err)
	}
	old := decode(stateV1Layout{Version: 1, MemSize: good.Spec.MemSize, GTTEntries: good.Spec.GTTEntries,
		PCI: good.PCI, Regs: good.Regs, GTT: good.GTT, Engine: good.Engine})
	err = v.Restore(old)
	if !errors.Is(err, ErrState) || !strings.Contains(err.Error(), "version 1, want 2") ||
		!strings.Contains(err.Error(), "back end and CAPS") {
		t.Fatalf("restoring a version 1 state: %v, want ErrState naming the version and what it lacks", err)
	}
	if after, _ := v.Save(); !reflect.DeepEqual(after, good) {
		t.Fatal("a refused version 1 state changed the device")
	}
}
