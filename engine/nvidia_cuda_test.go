//go:build cuda

package engine_test

// The engine's checks of every back end on the NVIDIA back end over a real
// GPU: built only with -tags cuda, and each skips, saying why, where
// libcuda.so.1 or a GPU is absent. GMIG_CUDA_PTX names a freshly built
// kernels.ptx to use instead of the embedded one.

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/internal/cuda"
)

func TestMain(m *testing.M) {
	if err := nvidia.KernelsFromEnv(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// testGPU returns GPU 0 or skips the test saying why there is none.
func testGPU(t testing.TB) *nvidia.GPU {
	t.Helper()
	g, err := nvidia.OpenGPU(0)
	if errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice) {
		t.Skipf("no NVIDIA GPU here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// TestNVIDIAMatchesSoftware: the differential check on the GPU, over
// shared anonymous memory like a pool memfd's.
func TestNVIDIAMatchesSoftware(t *testing.T) {
	g := testGPU(t)
	win, err := unix.Mmap(-1, 0, 8<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(win) })
	runDifferential(t, g, win)
}

// TestNVIDIALocalMatchesSoftware: the differential check with device-local
// memory on the GPU beside the window.
func TestNVIDIALocalMatchesSoftware(t *testing.T) {
	g := testGPU(t)
	win, err := unix.Mmap(-1, 0, 4<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(win) })
	runLocalDifferential(t, g, win)
}

// TestNVIDIAEngineModel: the engine's model test on the GPU.
func TestNVIDIAEngineModel(t *testing.T) { engine.RunEngineModel(t, onNVIDIA(testGPU(t), false)) }

// TestNVIDIAGuestModule: guest modules on the GPU, with real PTX.
func TestNVIDIAGuestModule(t *testing.T) { engine.RunGuestModule(t, onNVIDIA(testGPU(t), true)) }

// TestNVIDIALaunchGrid: kernels13.ptx's kernels through LAUNCH_GRID on the
// GPU, results as Go computes them and bit for bit the CUDA model's.
func TestNVIDIALaunchGrid(t *testing.T) {
	gpu := engine.RunLaunchGrid(t, onNVIDIA(testGPU(t), true), 1)
	model := engine.RunLaunchGrid(t, onNVIDIA(nvidia.NewModelGPU(), true), 1)
	for name, want := range model {
		if !bytes.Equal(gpu[name], want) {
			t.Errorf("%s: the GPU's output differs from the model's", name)
		}
	}
	if len(gpu) != len(model) || len(gpu) != 3 {
		t.Errorf("outputs of %d kernels on the GPU, %d on the model; want 3", len(gpu), len(model))
	}
}

// TestNVIDIADeviceAddr: every command on device addresses on the GPU
// leaves the bytes the software back end leaves, and a module loaded from
// and launched with parameters at device addresses runs.
func TestNVIDIADeviceAddr(t *testing.T) {
	g := testGPU(t)
	var sw, gpu []byte
	t.Run("software", func(t *testing.T) { sw = engine.RunDeviceAddr(t, nil) })
	t.Run("gpu", func(t *testing.T) { gpu = engine.RunDeviceAddr(t, localOn(g, false)) })
	if sw == nil || gpu == nil || !bytes.Equal(sw, gpu) {
		t.Fatalf("the GPU and the software back end differ (%d and %d bytes)", len(gpu), len(sw))
	}
	t.Run("grid", func(t *testing.T) { engine.RunDeviceAddrGrid(t, localOn(g, true)) })
}

// BenchmarkNVIDIALaunchGrid: the cost per LAUNCH_GRID of the empty kernel
// through the engine on the GPU (batches of 1000 and a fence).
func BenchmarkNVIDIALaunchGrid(b *testing.B) {
	engine.BenchLaunchGrid(b, onNVIDIA(testGPU(b), true))
}
