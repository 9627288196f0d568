//go:build !cgo

package nvml

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// NVML's C API (nvml.h), the calls Inventory makes, for builds without cgo.
const libName = "libnvidia-ml.so.1"

// nvmlMemory mirrors nvmlMemory_t; nvmlUtilization mirrors nvmlUtilization_t.
type (
	nvmlMemory      struct{ total, free, used uint64 }
	nvmlUtilization struct{ gpu, memory uint32 }
)

type nvmlFuncs struct {
	init      func() int32
	shutdown  func() int32
	errString func(r int32) *byte
	driverVer func(buf *byte, n uint32) int32
	cudaVer   func(v *int32) int32
	count     func(n *uint32) int32
	byIndex   func(i uint32, dev *uintptr) int32
	name      func(dev uintptr, buf *byte, n uint32) int32
	uuid      func(dev uintptr, buf *byte, n uint32) int32
	memory    func(dev uintptr, m *nvmlMemory) int32
	utilRates func(dev uintptr, u *nvmlUtilization) int32
}

var nvmlSymbols = []struct {
	name string
	f    func(*nvmlFuncs) any
}{
	{"nvmlInit_v2", func(f *nvmlFuncs) any { return &f.init }},
	{"nvmlShutdown", func(f *nvmlFuncs) any { return &f.shutdown }},
	{"nvmlErrorString", func(f *nvmlFuncs) any { return &f.errString }},
	{"nvmlSystemGetDriverVersion", func(f *nvmlFuncs) any { return &f.driverVer }},
	{"nvmlSystemGetCudaDriverVersion", func(f *nvmlFuncs) any { return &f.cudaVer }},
	{"nvmlDeviceGetCount_v2", func(f *nvmlFuncs) any { return &f.count }},
	{"nvmlDeviceGetHandleByIndex_v2", func(f *nvmlFuncs) any { return &f.byIndex }},
	{"nvmlDeviceGetName", func(f *nvmlFuncs) any { return &f.name }},
	{"nvmlDeviceGetUUID", func(f *nvmlFuncs) any { return &f.uuid }},
	{"nvmlDeviceGetMemoryInfo", func(f *nvmlFuncs) any { return &f.memory }},
	{"nvmlDeviceGetUtilizationRates", func(f *nvmlFuncs) any { return &f.utilRates }},
}

func cstr(b []byte) string {
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

func inventory() Report {
	r := Report{Via: "purego"}
	lib, err := purego.Dlopen(libName, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		r.Reason = libName + " not found"
		return r
	}
	var f nvmlFuncs
	for _, s := range nvmlSymbols {
		sym, err := purego.Dlsym(lib, s.name)
		if err != nil {
			r.Reason = fmt.Sprintf("%s lacks %s", libName, s.name)
			return r
		}
		purego.RegisterFunc(s.f(&f), sym)
	}
	errStr := func(ret int32) string {
		if p := f.errString(ret); p != nil {
			var b []byte // a byte at a time: never past the terminator
			for i := 0; i < 256; i++ {
				c := *(*byte)(unsafe.Add(unsafe.Pointer(p), i))
				if c == 0 {
					break
				}
				b = append(b, c)
			}
			return string(b)
		}
		return fmt.Sprintf("NVML error %d", ret)
	}
	if ret := f.init(); ret != 0 {
		r.Reason = errStr(ret)
		return r
	}
	defer f.shutdown()
	r.Available = true
	var errs []error
	note := func(what string, ret int32) bool {
		if ret != 0 {
			errs = append(errs, errors.New(what+": "+errStr(ret)))
		}
		return ret == 0
	}
	buf := make([]byte, 96)
	if note("driver version", f.driverVer(&buf[0], uint32(len(buf)))) {
		r.DriverVersion = cstr(buf)
	}
	var cv int32
	if note("CUDA version", f.cudaVer(&cv)) {
		r.CUDAVersion = int(cv)
	}
	var n uint32
	note("device count", f.count(&n))
	for i := range n {
		var d uintptr
		if !note("device handle", f.byIndex(i, &d)) {
			continue
		}
		g := GPU{Index: int(i)}
		if note("name", f.name(d, &buf[0], uint32(len(buf)))) {
			g.Name = cstr(buf)
		}
		if note("uuid", f.uuid(d, &buf[0], uint32(len(buf)))) {
			g.UUID = cstr(buf)
		}
		var m nvmlMemory
		if note("memory", f.memory(d, &m)) {
			g.MemoryTotal, g.MemoryUsed = m.total, m.used
		}
		var u nvmlUtilization
		if note("utilisation", f.utilRates(d, &u)) {
			g.UtilGPU, g.UtilMemory = u.gpu, u.memory
		}
		r.GPUs = append(r.GPUs, g)
	}
	if len(errs) > 0 {
		r.Reason = errors.Join(errs...).Error()
	}
	return r
}
