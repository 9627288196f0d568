package migtest

import (
	"testing"

	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/vgpu"
)

// UseCUDAModel makes the CUDA back end of this test process the software
// model of a GPU (GMIG_CUDA_MODEL=1, engine/nvidia/model.go), so cuda
// vGPUs run everywhere, CI included. It must come before the process first
// opens GPU 0: nvidia.OpenGPU keeps what it opened first. The model runs
// one guest module, "scale" (u32 at base+off+4i *= mul for i < threads).
func UseCUDAModel(t *testing.T) { t.Setenv("GMIG_CUDA_MODEL", "1") }

// NewVGPUConfig creates the vGPU cfg describes in p, closed at the end of
// the test.
func NewVGPUConfig(t testing.TB, p *pool.Pool, cfg vgpu.Config) *vgpu.VGPU {
	t.Helper()
	v, err := vgpu.New(cfg, p, Log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })
	return v
}
