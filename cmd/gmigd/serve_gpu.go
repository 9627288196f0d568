package main

import (
	"flag"

	"github.com/gmig-dev/gmig/hostd"
)

// gpuFlags are serve's choice of GPU (docs/nvidia.md, "Choosing the
// GPU"); registered on serve's flag set, they can be set in its
// configuration file too (gpu = 1).
type gpuFlags struct {
	gpu, lockDir *string
}

// registerGPU adds -gpu and -gpu-lock-dir to fs (serve and status).
func registerGPU(fs *flag.FlagSet, withChoice bool) gpuFlags {
	var g gpuFlags
	if withChoice {
		g.gpu = fs.String("gpu", "", "the GPU cuda vGPUs run on: an index or a UUID as gmigd status lists them (default CUDA's first GPU), or "+hostd.GPUNone+" to refuse cuda vGPUs; one not on this host stops gmigd, naming those that are")
	}
	g.lockDir = fs.String("gpu-lock-dir", hostd.DefaultGPULockDir, "the directory of the per-GPU locks that keep two gmigd of this host off one GPU (the same for every gmigd of the host; empty: no lock)")
	return g
}

// config fills in the host's GPU fields.
func (g gpuFlags) config(c hostd.Config) hostd.Config {
	c.GPU, c.GPULockDir = *g.gpu, *g.lockDir
	return c
}
