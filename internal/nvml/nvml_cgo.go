//go:build cgo

package nvml

import (
	"errors"

	gonvml "github.com/NVIDIA/go-nvml/pkg/nvml"
)

func inventory() Report {
	r := Report{Via: "go-nvml"}
	if ret := gonvml.Init(); ret != gonvml.SUCCESS {
		r.Reason = ret.Error()
		if ret == gonvml.ERROR_LIBRARY_NOT_FOUND {
			r.Reason = "libnvidia-ml.so.1 not found"
		}
		return r
	}
	defer gonvml.Shutdown()
	r.Available = true
	var errs []error
	note := func(what string, ret gonvml.Return) {
		if ret != gonvml.SUCCESS {
			errs = append(errs, errors.New(what+": "+ret.Error()))
		}
	}
	var ret gonvml.Return
	r.DriverVersion, ret = gonvml.SystemGetDriverVersion()
	note("driver version", ret)
	r.CUDAVersion, ret = gonvml.SystemGetCudaDriverVersion()
	note("CUDA version", ret)
	n, ret := gonvml.DeviceGetCount()
	note("device count", ret)
	for i := range n {
		d, ret := gonvml.DeviceGetHandleByIndex(i)
		if ret != gonvml.SUCCESS {
			note("device handle", ret)
			continue
		}
		g := GPU{Index: i}
		g.Name, ret = d.GetName()
		note("name", ret)
		g.UUID, ret = d.GetUUID()
		note("uuid", ret)
		if m, ret := d.GetMemoryInfo(); ret == gonvml.SUCCESS {
			g.MemoryTotal, g.MemoryUsed = m.Total, m.Used
		} else {
			note("memory", ret)
		}
		if u, ret := d.GetUtilizationRates(); ret == gonvml.SUCCESS {
			g.UtilGPU, g.UtilMemory = u.Gpu, u.Memory
		} else {
			note("utilisation", ret)
		}
		r.GPUs = append(r.GPUs, g)
	}
	if len(errs) > 0 {
		r.Reason = errors.Join(errs...).Error()
	}
	return r
}
