package main

import (
	"encoding/json"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/internal/nvml"
)

// status is what gmigd status reports: the host's GPUs as NVML sees them,
// which gmigd owns each, and whether the cuda back end can run here.
type status struct {
	NVML nvml.Report     `json:"nvml"`
	GPUs hostd.GPUReport `json:"gpus"`
	CUDA cudaStatus      `json:"cuda"`
}

type cudaStatus struct {
	Available bool   `json:"available"`
	Reason    string `json:"reason,omitempty"`
	GPU       string `json:"gpu,omitempty"`
	Compute   string `json:"compute,omitempty"`
	Driver    int    `json:"driver,omitempty"`
}

const statusUsage = `usage: gmigd status [-json] [-gpu-lock-dir DIR]

Prints this host's GPUs as NVML sees them, which gmigd (run dir, pid)
owns each (read from the GPU locks every gmigd serve takes), and whether
the cuda back end can run here (no GPU is a normal state).`

// cmdStatus prints the host's GPU inventory. No GPU, no NVML or no CUDA
// driver is a normal state: it is reported and the command succeeds.
func cmdStatus(args []string) error {
	fs := newFlagSet("status", statusUsage)
	asJSON := fs.Bool("json", false, "print JSON")
	gpu := registerGPU(fs, false)
	if _, err := parseN(fs, args); err != nil {
		return err
	}
	st := status{NVML: nvml.Inventory(), GPUs: hostd.GPUs(*gpu.lockDir)}
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
	printGPUOwners(st.GPUs)
	if st.CUDA.Available {
		fmt.Printf("cuda back end: available (CUDA's first GPU: %s, %s, CUDA driver API %d)\n", st.CUDA.GPU, st.CUDA.Compute, st.CUDA.Driver)
	} else {
		fmt.Printf("cuda back end: not available (%s); vGPUs use the software back end\n", st.CUDA.Reason)
	}
	return nil
}

// printGPUOwners prints which gmigd owns each GPU.
func printGPUOwners(r hostd.GPUReport) {
	if len(r.GPUs) == 0 {
		return
	}
	fmt.Printf("GPU owners (GPUs from %s, locks in %s):\n", r.Source, r.LockDir)
	w := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "  INDEX\tCUDA\tUUID\tNAME\tMEMORY\tOWNER")
	for _, g := range r.GPUs {
		cu, owner := fmt.Sprint(g.CUDAOrdinal), "-"
		if g.CUDAOrdinal < 0 {
			cu = "-"
		}
		if g.Owner != nil {
			owner = fmt.Sprintf("gmigd pid %d, run dir %s", g.Owner.PID, g.Owner.RunDir)
		}
		fmt.Fprintf(w, "  %d\t%s\t%s\t%s\t%d MiB\t%s\n", g.Index, cu, g.UUID, g.Name, g.MemoryTotal>>20, owner)
	}
	w.Flush()
	if r.Reason != "" {
		fmt.Printf("  note: %s\n", r.Reason)
	}
}
