package cluster

import (
	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/vgpu"
)

// BackendFlags are the `gmigd serve` flags (Options.Extra) of daemons of
// one cluster on this machine whose vGPUs run on back end backend. On a
// host with a GPU each daemon would otherwise take the per-GPU lock of
// CUDA's first GPU, and the second would find it held by the first and
// stop: cuda daemons share the one GPU, each its own process and CUDA
// context, without the lock (-gpu-lock-dir=); the others have no GPU at
// all (-gpu none), as software vGPUs need none.
func BackendFlags(backend string) []string {
	if backend == vgpu.BackendCUDA {
		return []string{"-gpu-lock-dir="}
	}
	return []string{"-gpu", hostd.GPUNone}
}
