package guest

import (
	"bytes"
	"os"
	"testing"
)

// TestHostileKernelIsTheEngines: the hostile program's kernel is the
// scribble entry of the engine's LAUNCH_GRID test kernels, byte for byte,
// so the CUDA model, which plays that entry by name, plays this one.
func TestHostileKernelIsTheEngines(t *testing.T) {
	engine, err := os.ReadFile("../engine/nvidia/testdata/kernels13.ptx")
	if err != nil {
		t.Fatal(err)
	}
	own, theirs := ptxEntry(hostileKernelPTX, hostileKernelEntry), ptxEntry(engine, hostileKernelEntry)
	if own == nil || !bytes.Equal(own, theirs) {
		t.Fatalf("hostile_kernel.ptx's %s:\n%s\nkernels13.ptx's:\n%s", hostileKernelEntry, own, theirs)
	}
}

// TestParseAttacksKernel: "kernel" is an attack by name; "all" leaves the
// choice to the device, which takes it only with modules on grids.
func TestParseAttacksKernel(t *testing.T) {
	got, err := ParseAttacks("kernel,gtt")
	if err != nil || len(got) != 2 || got[0] != AttackKernel {
		t.Fatalf("ParseAttacks(kernel,gtt) = %v, %v", got, err)
	}
	if got, err := ParseAttacks("all"); got != nil || err != nil {
		t.Fatalf("ParseAttacks(all) = %v, %v; want nil (the device's)", got, err)
	}
	if n := len(AttacksFor(0)); n != len(Attacks) {
		t.Errorf("a device without modules: %d attacks, want %d", n, len(Attacks))
	}
	all := AttacksFor(^uint32(0))
	if all[len(all)-1] != AttackKernel {
		t.Errorf("a device with modules on grids: %v, want kernel last", all)
	}
}

// ptxEntry is entry's text in ptx, from ".visible .entry NAME(" to the
// closing brace at the start of a line; nil if there is none.
func ptxEntry(ptx []byte, entry string) []byte {
	i := bytes.Index(ptx, []byte(".visible .entry "+entry+"("))
	if i < 0 {
		return nil
	}
	j := bytes.Index(ptx[i:], []byte("\n}"))
	if j < 0 {
		return nil
	}
	return ptx[i : i+j+2]
}
