package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/internal/nvml"
)

// status is what gmigd status reports: the host's GPUs as NVML sees them
// and whether the cuda back end can run here.
type status struct {
	NVML nvml.Report `json:"nvml"`
	CUDA cudaStatus  `json:"cuda"`
}

type cudaStatus struct {
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"`
	GPU       string `json:"gpu,omitempty"`
	Compute   string `json:"compute,omitempty"`
	Driver    int    `json:"driver,omitempty"`
}

const statusUsage = `usage: gmigd status [-json]

Prints this host's GPUs as NVML sees them and whether the cuda back end can
run here (no GPU is a normal state).`

// cmdStatus prints the host's GPU inventory. No GPU, no NVML or no CUDA
// driver is a normal state: it is reported and the command succeeds.
func cmdStatus(args []string) error {
	fs := newFlagSet("status", statusUsage)
	asJSON := fs.Bool("json", false, "print JSON")
	if _, err := parseN(fs, args); err != nil {
		return err
	}
	st := status{NVML: nvml.Inventory()}
	if g, err := nvidia.OpenGPU(0); err != nil {
		st.CUDA.Reason = err.Error()
	} else {
		info := g.Info()
		st.CUDA = cudaStatus{Available: true, GPU: info.Name, Compute: fmt.Sprintf("sm_%d%d", info.ComputeMajor, info.ComputeMinor)}
		if d := g.Device(); d != nil {
			st.CUDA.Driver = d.Driver().Version()
		}
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(st)
	}
	fmt.Print(st.NVML)
	if st.CUDA.Available {
		fmt.Printf("cuda back end: available on GPU 0 (%s, %s, CUDA driver API %d)\n", st.CUDA.GPU, st.CUDA.Compute, st.CUDA.Driver)
	} else {
		fmt.Printf("cuda back end: not available (%s); vGPUs use the software back end\n", st.CUDA.Reason)
	}
	return nil
}
