// Package nvml is the host's GPU inventory for gmigd status (an absent GPU
// or library is a normal state, docs/nvidia.md): model, memory, driver and
// utilisation of each NVIDIA GPU, read through NVML (libnvidia-ml.so.1,
// loaded at run time). A machine without the library or without a GPU is
// a normal state: Inventory says so in Available and Reason and never
// fails or crashes for it.
//
// A cgo build reads NVML through github.com/NVIDIA/go-nvml (nvml_cgo.go);
// go-nvml needs cgo, so a build without it (CGO_ENABLED=0, which gmig's
// builds need not have) makes the same few calls through purego
// (nvml_purego.go) and reports the same thing.
package nvml

import "fmt"

// GPU is one GPU as NVML reports it.
type GPU struct {
	Index       int    `json:"index"`
	Name        string `json:"name"`
	UUID        string `json:"uuid"`
	MemoryTotal uint64 `json:"memory_total"` // bytes
	MemoryUsed  uint64 `json:"memory_used"`
	UtilGPU     uint32 `json:"util_gpu"`    // percent of the last sample period
	UtilMemory  uint32 `json:"util_memory"` // percent
}

// Report is the host's GPU inventory.
type Report struct {
	Available     bool   `json:"available"`        // NVML loaded and initialised
	Reason        string `json:"reason,omitempty"` // why not, or what failed
	Via           string `json:"via"`              // "go-nvml" or "purego"
	DriverVersion string `json:"driver_version,omitempty"`
	CUDAVersion   int    `json:"cuda_version,omitempty"` // 1000*major + 10*minor
	GPUs          []GPU  `json:"gpus"`
}

// Inventory reads the GPU inventory now.
func Inventory() Report { return inventory() }

// String formats the report for gmigd status.
func (r Report) String() string {
	if !r.Available {
		return fmt.Sprintf("NVML: not available (%s): no GPU inventory\n", r.Reason)
	}
	s := fmt.Sprintf("NVML (%s): driver %s, CUDA %d.%d, %d GPU(s)\n", r.Via, r.DriverVersion, r.CUDAVersion/1000, r.CUDAVersion%1000/10, len(r.GPUs))
	for _, g := range r.GPUs {
		s += fmt.Sprintf("  GPU %d  %s  %s  memory %d MiB (%d MiB used)  utilisation gpu %d%% memory %d%%\n",
			g.Index, g.Name, g.UUID, g.MemoryTotal>>20, g.MemoryUsed>>20, g.UtilGPU, g.UtilMemory)
	}
	if r.Reason != "" {
		s += "  note: " + r.Reason + "\n"
	}
	return s
}
