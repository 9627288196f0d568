package engine

import (
	"errors"
	"strings"
	"testing"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/guest"
)

// TestModuleImage checks the KERNEL_LOAD_MODULE image format (§6.8).
func TestModuleImage(t *testing.T) {
	entry, ptx, err := parseModuleImage(guest.ModuleImage("scale", []byte(".version 7.0\x00junk")))
	if err != nil || entry != "scale" || string(ptx) != ".version 7.0" {
		t.Fatalf("parse = %q, %q, %v", entry, ptx, err)
	}
	for _, bad := range [][]byte{
		[]byte("no nul"),
		[]byte("\x00.version"),
		[]byte("name\x00"),
		append([]byte(strings.Repeat("e", abi.ModuleMaxEntry+1)), 0, '.'),
	} {
		if _, _, err := parseModuleImage(bad); !errors.Is(err, ErrBadKernel) {
			t.Errorf("parse(%q) = %v, want ErrBadKernel", bad, err)
		}
	}
}

// TestSoftwareRefusesModules checks that the software back end refuses a
// guest module with a KERNEL fault that says why, and that a launch of the
// handle then fails as unknown.
func TestSoftwareRefusesModules(t *testing.T) {
	h := newHarness(t, 31, 4096)
	img := guest.ModuleImage("scale", []byte(".version 7.0\n.target sm_80\n"))
	h.write(tDataGA, img)
	h.submit(KernelLoadModule{Handle: 5, Args: 2, Image: tDataGA, Len: uint32(len(img))},
		Launch{Handle: 5, Args: []uint64{1, 2}})
	fs := h.ev.takeFaults()
	if len(fs) != 2 {
		t.Fatalf("%d faults, want 2: %v", len(fs), fs)
	}
	if fs[0].Code != abi.ErrKernel || fs[0].Opcode != abi.OpKernelLoadModule || !errors.Is(fs[0].Err, ErrNoModules) ||
		!strings.Contains(fs[0].Err.Error(), "nvidia back end") {
		t.Errorf("load fault %+v (%v), want KERNEL from ErrNoModules naming the nvidia back end", fs[0], fs[0].Err)
	}
	if fs[1].Code != abi.ErrKernel || fs[1].Opcode != abi.OpLaunch {
		t.Errorf("launch fault %+v, want KERNEL", fs[1])
	}
	st, err := func() (State, error) { h.e.Quiesce(); defer h.e.Resume(); return h.e.Save() }()
	if err != nil || len(st.Kernels) != 0 || len(st.Modules) != 0 || st.DeviceVA != 0 {
		t.Fatalf("state after a refused module: %+v, %v", st, err)
	}
}

// TestModuleStateValidate checks that saved modules and module kernel
// objects must agree.
func TestModuleStateValidate(t *testing.T) {
	m := Module{Handle: 3, Entry: "k", PTX: []byte(".version 7.0"), Args: 1}
	good := State{Kernels: []KernelObject{{3, abi.KernelModule}}, Modules: []Module{m}}
	if err := good.Validate(); err != nil {
		t.Fatalf("valid state refused: %v", err)
	}
	for name, s := range map[string]State{
		"module without object": {Modules: []Module{m}},
		"object without module": {Kernels: []KernelObject{{3, abi.KernelModule}}},
		"no arguments":          {Kernels: good.Kernels, Modules: []Module{{Handle: 3, Entry: "k", PTX: m.PTX}}},
		"wrong kind":            {Kernels: []KernelObject{{3, abi.KernelSaxpy}}, Modules: []Module{m}},
	} {
		if err := s.Validate(); !errors.Is(err, ErrBadState) {
			t.Errorf("%s: Validate = %v, want ErrBadState", name, err)
		}
	}
	// A state with a module cannot be restored onto the software back end.
	e := New(Config{Backend: NewSoftware(nil), GTT: &fakeGTT{}})
	if err := e.Restore(good); !errors.Is(err, ErrBadState) || !errors.Is(err, ErrNoModules) {
		t.Fatalf("Restore onto software = %v, want ErrBadState and ErrNoModules", err)
	}
}
