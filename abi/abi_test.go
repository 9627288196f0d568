package abi

import (
	"encoding/binary"
	"testing"
)

// TestCommandSizes checks that each wire struct has the size the ABI
// document gives it.
func TestCommandSizes(t *testing.T) {
	cases := []struct {
		name string
		v    any
		want int
	}{
		{"CmdHeader", CmdHeader{}, CmdHeaderSize},
		{"CmdCopy", CmdCopy{}, CmdCopySize},
		{"CmdFill", CmdFill{}, CmdFillSize},
		{"CmdDMA", CmdDMA{}, CmdDMASize},
		{"CmdFence", CmdFence{}, CmdFenceSize},
		{"CmdKernelLoad", CmdKernelLoad{}, CmdKernelLoadSize},
		{"CmdKernelUnload", CmdKernelUnload{}, CmdKernelUnloadSize},
		{"CmdLaunchBase", CmdLaunchBase{}, CmdLaunchBaseSize},
		{"CmdKernelLoadModule", CmdKernelLoadModule{}, CmdKernelLoadModuleSize},
		{"CmdLaunchParams", CmdLaunchParams{}, CmdLaunchParamsSize},
		{"CmdLaunchGrid", CmdLaunchGrid{}, CmdLaunchGridSize},
	}
	for _, c := range cases {
		if got := binary.Size(c.v); got != c.want {
			t.Errorf("%s: binary size %d, want %d", c.name, got, c.want)
		}
		if c.want%CmdAlign != 0 {
			t.Errorf("%s: size %d not a multiple of %d", c.name, c.want, CmdAlign)
		}
	}
	if CmdLaunchBaseSize+8*LaunchMaxArgs > CmdMaxSize {
		t.Errorf("largest LAUNCH (%d bytes) exceeds CmdMaxSize", CmdLaunchBaseSize+8*LaunchMaxArgs)
	}
}

func TestLayout(t *testing.T) {
	if GTTMaxEntries != 65536 {
		t.Errorf("GTTMaxEntries = %d, want 65536", GTTMaxEntries)
	}
	if RegsEnd > GTTOffset {
		t.Errorf("register block [0,%#x) overlaps GTT window at %#x", RegsEnd, GTTOffset)
	}
	if GTTReservedMask&(GTTFlagsMask|GTTPageMask) != 0 {
		t.Error("reserved GTT bits overlap defined fields")
	}
	if BAR0Size&(BAR0Size-1) != 0 {
		t.Error("BAR0Size is not a power of two")
	}
}
