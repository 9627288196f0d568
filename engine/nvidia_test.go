package engine_test

// The engine's checks of every back end (backends_test.go) on the NVIDIA
// back end over the software model of a device: every build, no GPU
// needed. nvidia_cuda_test.go runs them on a real GPU.

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/engine/nvidia"
)

// newNVIDIAOn makes an NVIDIA back end on g over window, closed with the
// test, which logs its traffic first.
func newNVIDIAOn(t testing.TB, g *nvidia.GPU, window []byte, wb nvidia.WriteBack, modules bool) *nvidia.NVIDIA {
	t.Helper()
	b, err := nvidia.NewNVIDIA(nvidia.NVIDIAConfig{GPU: g, Window: window, WriteBack: wb, Modules: modules})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	t.Cleanup(func() {
		st := b.Stats()
		t.Logf("%d ops: %d B read from the window by kernels, %d B written back, %d B gap uploads",
			st.Commands, st.HostReadBytes, st.WriteBackBytes, st.GapBytes)
	})
	return b
}

// onNVIDIA makes NVIDIA back ends on g that write back at fences.
func onNVIDIA(g *nvidia.GPU, modules bool) engine.NewBackend {
	return func(t testing.TB, window []byte) engine.Backend {
		return newNVIDIAOn(t, g, window, nvidia.WriteBackFence, modules)
	}
}

// runDifferential is engine.RunDifferential on g under both write-back
// policies.
func runDifferential(t *testing.T, g *nvidia.GPU, win []byte) {
	for _, wb := range []nvidia.WriteBack{nvidia.WriteBackFence, nvidia.WriteBackCommand} {
		t.Run(fmt.Sprint("writeback", wb), func(t *testing.T) {
			engine.RunDifferential(t, func(t testing.TB, window []byte) engine.Backend {
				return newNVIDIAOn(t, g, window, wb, false)
			}, win, uint64(wb))
		})
	}
}

func TestNVIDIAModelMatchesSoftware(t *testing.T) {
	runDifferential(t, nvidia.NewModelGPU(), make([]byte, 8<<20))
}

// runLocalDifferential is engine.RunLocalDifferential on g: 2 MiB of
// device-local memory on the GPU beside win, under both write-back
// policies (copies between the aperture and local memory go through the
// aperture's pending ranges).
func runLocalDifferential(t *testing.T, g *nvidia.GPU, win []byte) {
	for _, wb := range []nvidia.WriteBack{nvidia.WriteBackFence, nvidia.WriteBackCommand} {
		t.Run(fmt.Sprint("writeback", wb), func(t *testing.T) {
			engine.RunLocalDifferential(t, func(t testing.TB, window []byte, local uint64) engine.Backend {
				b, err := nvidia.NewNVIDIA(nvidia.NVIDIAConfig{GPU: g, Window: window, LocalSize: local, WriteBack: wb})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() {
					if err := b.Close(); err != nil {
						t.Errorf("Close: %v", err)
					}
				})
				if a := b.DeviceAddrBase(); a == 0 || a%(2<<20) != 0 {
					t.Fatalf("DeviceAddrBase %#x, want a nonzero 2 MiB multiple", a)
				}
				return b
			}, win, 2<<20, 10+uint64(wb))
		})
	}
}

// TestNVIDIAModelLocalMatchesSoftware: commands over device-local memory
// (and between it and the aperture) on the NVIDIA back end leave the same
// bytes as on the software back end.
func TestNVIDIAModelLocalMatchesSoftware(t *testing.T) {
	runLocalDifferential(t, nvidia.NewModelGPU(), make([]byte, 4<<20))
}

func TestNVIDIAModelEngine(t *testing.T) {
	engine.RunEngineModel(t, onNVIDIA(nvidia.NewModelGPU(), false))
}

func TestNVIDIAModelGuestModule(t *testing.T) {
	engine.RunGuestModule(t, onNVIDIA(nvidia.NewModelGPU(), true))
}

// TestNVIDIAModelLaunchGrid: LAUNCH_GRID of kernels13.ptx's kernels on the
// CUDA model, results as Go computes them.
func TestNVIDIAModelLaunchGrid(t *testing.T) {
	engine.RunLaunchGrid(t, onNVIDIA(nvidia.NewModelGPU(), true), 1)
}

// TestNVIDIAModelLaunchGridFault: a kernel that faults on the model is
// reported at the next fence against its launch, and the model's context
// answers 719 from then on. Each back end gets a model GPU of its own: a
// faulted one stays lost.
func TestNVIDIAModelLaunchGridFault(t *testing.T) {
	engine.RunLaunchGridFault(t, func(t testing.TB, window []byte) engine.Backend {
		return onNVIDIA(nvidia.NewModelGPU(), true)(t, window)
	})
}

// BenchmarkNVIDIAModelLaunchGrid: the engine's cost per LAUNCH_GRID (ring
// fetch, checks, parameter buffer, back end) on the CUDA model.
func BenchmarkNVIDIAModelLaunchGrid(b *testing.B) {
	engine.BenchLaunchGrid(b, onNVIDIA(nvidia.NewModelGPU(), true))
}

// localOn makes NVIDIA back ends on g with device-local memory (and guest
// modules when modules is set).
func localOn(g *nvidia.GPU, modules bool) engine.NewLocalBackend {
	return func(t testing.TB, window []byte, local uint64) engine.Backend {
		b, err := nvidia.NewNVIDIA(nvidia.NVIDIAConfig{GPU: g, Window: window, LocalSize: local, Modules: modules})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := b.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
		return b
	}
}

// TestDeviceAddrModelMatchesSoftware: every command on device addresses
// leaves the same bytes on the CUDA model as on the software back end.
func TestDeviceAddrModelMatchesSoftware(t *testing.T) {
	var sw, nv []byte
	t.Run("software", func(t *testing.T) { sw = engine.RunDeviceAddr(t, nil) })
	t.Run("model", func(t *testing.T) { nv = engine.RunDeviceAddr(t, localOn(nvidia.NewModelGPU(), false)) })
	if sw == nil || nv == nil || !bytes.Equal(sw, nv) {
		t.Fatalf("the CUDA model and the software back end differ (%d and %d bytes)", len(nv), len(sw))
	}
}

// TestDeviceAddrGridModel: a module loaded from, and launched with a
// parameter buffer at, device addresses on the CUDA model.
func TestDeviceAddrGridModel(t *testing.T) {
	engine.RunDeviceAddrGrid(t, localOn(nvidia.NewModelGPU(), true))
}
