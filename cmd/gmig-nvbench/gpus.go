package main

import (
	"fmt"
	"strings"

	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/vgpu"
)

// gpuPair is where migrate's two hosts run their cuda vGPUs: the
// source's GPU and the destination's (the same one by default).
type gpuPair struct {
	sel  [2]string    // hostd.Config.GPU of each host
	gpus [2]hostd.GPU // what each names
}

// parseGPUs reads -gpus: "" (CUDA's first GPU for both), one GPU for
// both, or SRC,DST, each an index or a UUID as gmigd status lists them;
// a GPU not on this machine is refused naming those that are.
func parseGPUs(v string) (gpuPair, error) {
	var p gpuPair
	parts := strings.Split(v, ",")
	switch len(parts) {
	case 1:
		p.sel = [2]string{parts[0], parts[0]}
	case 2:
		p.sel = [2]string{parts[0], parts[1]}
	default:
		return p, fmt.Errorf("-gpus %q: want SRC,DST", v)
	}
	for i := range p.sel {
		p.sel[i] = strings.TrimSpace(p.sel[i])
		g, err := hostd.ChooseGPU(p.sel[i])
		if err != nil {
			return p, fmt.Errorf("-gpus %q: %w", v, err)
		}
		p.gpus[i] = g
	}
	return p, nil
}

// String describes the pair for the output.
func (p gpuPair) String() string {
	d := func(g hostd.GPU) string {
		return fmt.Sprintf("GPU %d (%s, %s, CUDA ordinal %d)", g.Index, g.Name, g.UUID, g.CUDAOrdinal)
	}
	if p.gpus[0].UUID == p.gpus[1].UUID {
		return "source and destination on " + d(p.gpus[0])
	}
	return "source on " + d(p.gpus[0]) + ", destination on " + d(p.gpus[1])
}

// check says whether vGPU v, on host side (0 source, 1 destination), runs
// on that side's GPU.
func (p gpuPair) check(side int, v *vgpu.VGPU) error {
	if v.GPU() == nil {
		return fmt.Errorf("vGPU %s is not on the CUDA back end", v.Name())
	}
	if got, want := v.GPU().Info().UUID, p.gpus[side].UUID; !strings.EqualFold(got, want) {
		return fmt.Errorf("vGPU %s runs on GPU %s, want %s", v.Name(), got, want)
	}
	return nil
}
