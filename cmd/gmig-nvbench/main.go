// Command gmig-nvbench measures gmig's NVIDIA back end on a machine with
// an NVIDIA GPU (docs/nvidia.md quotes its output):
//
//	gmig-nvbench hash      [flags]  page-hash throughput: GPU over device and host memory, CPU
//	gmig-nvbench aperture  [flags]  what keeping the aperture coherent costs per command
//	gmig-nvbench migrate   [flags]  a workload migrated between two vGPUs on the GPU, or
//	                                between two GPUs with -gpus SRC,DST (digest equal to a
//	                                never-migrated run), then downtime by size, dirty
//	                                fraction and strategy
//
// It needs libcuda.so.1 at run time only; GMIG_CUDA_PTX names a kernels.ptx
// to use instead of the embedded one.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/internal/bytesize"
)

const usage = `usage: gmig-nvbench <hash|aperture|migrate> [flags]`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if err := nvidia.KernelsFromEnv(); err != nil {
		fmt.Fprintln(os.Stderr, "gmig-nvbench:", err)
		os.Exit(1)
	}
	cmds := map[string]func([]string) error{"hash": cmdHash, "aperture": cmdAperture, "migrate": cmdMigrate}
	run, ok := cmds[os.Args[1]]
	if !ok {
		fmt.Fprintln(os.Stderr, usage)
		os.Exit(2)
	}
	if err := run(os.Args[2:]); err != nil {
		fmt.Fprintf(os.Stderr, "gmig-nvbench %s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
}

// sizes is a flag.Value for a comma-separated list of byte sizes.
type sizes []uint64

func (s *sizes) String() string {
	var parts []string
	for _, v := range *s {
		parts = append(parts, fmtSize(v))
	}
	return strings.Join(parts, ",")
}

func (s *sizes) Set(v string) error {
	*s = nil
	for _, p := range strings.Split(v, ",") {
		n, err := bytesize.Parse(strings.TrimSpace(p))
		if err != nil {
			return err
		}
		*s = append(*s, n)
	}
	return nil
}

func fmtSize(n uint64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dG", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dM", n>>20)
	}
	return fmt.Sprint(n)
}

func openGPU() (*nvidia.GPU, error) {
	g, err := nvidia.OpenGPU(0)
	if err != nil {
		return nil, err
	}
	info := g.Info()
	if g.Device() == nil {
		fmt.Printf("GPU 0: a software model of a GPU (%s): timings mean nothing\n", nvidia.ModelEnv)
		return g, nil
	}
	free, total, _ := g.Device().MemInfo()
	fmt.Printf("GPU 0: %s (sm_%d%d), %s, %.1f of %.1f GiB free, CUDA driver API %d\n", info.Name,
		info.ComputeMajor, info.ComputeMinor, info.PCIBusID, float64(free)/(1<<30), float64(total)/(1<<30), g.Device().Driver().Version())
	return g, nil
}
