package vgpu

import (
	"fmt"

	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/engine/nvidia/gpuproc"
	"github.com/gmig-dev/gmig/internal/pool"
)

// Back ends a vGPU can be created with (Config.Backend).
const (
	// BackendSoftware runs commands in Go on the host pool (the default).
	BackendSoftware = "software"
	// BackendCUDA runs them on an NVIDIA GPU (Config.GPU) through the
	// CUDA driver API, with graphics memory mirrored in GPU memory and
	// device-local memory in GPU memory alone (docs/nvidia.md).
	BackendCUDA = "cuda"
)

// Where a CUDA vGPU's back end, and so its GPU context, lives
// (Config.GPUIsolation; docs/nvidia.md, "Isolation").
const (
	// IsolationProcess runs it in a GPU worker process of its own that
	// gmigd starts and supervises (engine/nvidia/gpuproc): its own CUDA
	// context, so the GPU's MMU keeps its kernels out of other vGPUs'
	// memory and a faulting kernel ends only this vGPU. The default.
	IsolationProcess = "process"
	// IsolationShared runs it in gmigd's own CUDA context, shared with
	// every other shared CUDA vGPU of this gmigd: a guest kernel can reach
	// their device memory, and a faulting one fails them all.
	IsolationShared = "shared"
)

// GPUOrdinal is the GPU the CUDA back end uses unless Config.GPU says
// otherwise: CUDA's first.
const GPUOrdinal = 0

// backendDefaults fills in and checks the back-end fields of a Config.
func (c Config) backendDefaults() (Config, error) {
	switch c.Backend {
	case "":
		c.Backend = BackendSoftware
	case BackendSoftware, BackendCUDA:
	default:
		return c, fmt.Errorf("%w: back end %q (want %q or %q)", ErrConfig, c.Backend, BackendSoftware, BackendCUDA)
	}
	if c.GuestModules && c.Backend != BackendCUDA {
		return c, fmt.Errorf("%w: guest modules need the %q back end", ErrConfig, BackendCUDA)
	}
	switch {
	case c.Backend != BackendCUDA:
		c.GPUIsolation = "" // a software vGPU has no GPU context
	case c.GPUIsolation == "":
		c.GPUIsolation = IsolationProcess
	case c.GPUIsolation != IsolationProcess && c.GPUIsolation != IsolationShared:
		return c, fmt.Errorf("%w: GPU isolation %q (want %q or %q)", ErrConfig, c.GPUIsolation, IsolationProcess, IsolationShared)
	}
	return c, nil
}

// newBackend makes the vGPU's back end over its partition of the pool
// mapping mem (the CAPS bits it adds are Config.caps's).
func (v *VGPU) newBackend(mem []byte, part pool.Partition) (engine.Backend, error) {
	if v.cfg.Backend != BackendCUDA {
		if v.cfg.LocalMemSize > 0 {
			return engine.NewSoftwareLocal(mem), nil
		}
		return engine.NewSoftware(mem), nil
	}
	var b nvidia.VGPUBackend
	var err error
	if v.cfg.GPUIsolation == IsolationShared {
		b, err = v.sharedBackend(mem, part)
	} else {
		b, err = gpuproc.Start(gpuproc.Config{
			Name:      v.cfg.Name,
			GPU:       v.cfg.GPU,
			Memfd:     v.file,
			Window:    mem[part.Offset:part.ApertureEnd():part.ApertureEnd()],
			WindowOff: part.Offset,
			LocalSize: part.Local, // on the GPU alone: the pool's local range stays untouched
			Modules:   v.cfg.GuestModules,
			Landed:    v.landed,
			Log:       v.log,
		})
	}
	if err != nil {
		return nil, fmt.Errorf("vgpu %s: %s back end: %w", v.cfg.Name, BackendCUDA, err)
	}
	v.gpu = b
	return b, nil
}

// sharedBackend is the CUDA back end in gmigd's own context.
func (v *VGPU) sharedBackend(mem []byte, part pool.Partition) (nvidia.VGPUBackend, error) {
	g, err := nvidia.OpenGPU(v.cfg.GPU)
	if err != nil {
		return nil, err
	}
	b, err := nvidia.NewNVIDIA(nvidia.NVIDIAConfig{
		GPU:       g,
		Window:    mem[part.Offset:part.ApertureEnd():part.ApertureEnd()],
		WindowOff: part.Offset,
		LocalSize: part.Local, // on the GPU alone: the pool's local range stays untouched
		Modules:   v.cfg.GuestModules,
		Landed:    v.landed,
		Log:       v.log,
	})
	if err != nil {
		return nil, err
	}
	return b, nil
}

// closeBackend releases the CUDA back end's device memory and unlocks the
// partition before the pool may reuse it (the engine has stopped).
func (v *VGPU) closeBackend() {
	if v.gpu == nil {
		return
	}
	if err := v.gpu.Close(); err != nil {
		v.log.Error().Err(err).Msg("vgpu: closing the CUDA back end")
	}
	v.gpu = nil
}

// GPU returns the vGPU's CUDA back end, or nil for the software back end:
// its page hasher (for a migration's tracker), device-local memory and
// traffic counters. It is in gmigd (isolation "shared") or a client of
// the vGPU's GPU worker ("process").
func (v *VGPU) GPU() nvidia.VGPUBackend { return v.gpu }

// GPUWorkerPID is the process id of the vGPU's GPU worker (isolation
// "process"), 0 without one or once it has ended.
func (v *VGPU) GPUWorkerPID() int {
	if c, ok := v.gpu.(*gpuproc.Client); ok && c.Alive() {
		return c.Pid()
	}
	return 0
}

// PlaceLocal puts device-local memory at device address addr, as the
// restore of a state saved at addr does (placeLocal), ahead of it: a
// migration's destination, told the source's address before the pages
// come, moves its memory there outside the downtime. Only while the vGPU
// runs nothing (a destination before its restore); errors are
// placeLocal's.
func (v *VGPU) PlaceLocal(addr uint64) error { return v.placeLocal(addr) }

// placeLocal asks the CUDA back end for device-local memory at addr, the
// saved RegDeviceAddrBase, before the engine's state, which must find it
// there, is restored: the device address a guest holds must not change
// (ABI 1.3). Where the driver does not grant it the error wraps
// nvidia.ErrDeviceAddr. The software back end's base is fixed.
func (v *VGPU) placeLocal(addr uint64) error {
	if v.gpu == nil || addr == 0 {
		return nil
	}
	if err := v.gpu.PlaceLocal(addr); err != nil {
		return fmt.Errorf("vgpu %s: %w", v.cfg.Name, err)
	}
	return nil
}

// landed reports a range of the window the NVIDIA back end just wrote
// back (an offset into the aperture) to the write observer, as the engine
// reports a command's writes: on that back end the bytes arrive after the
// command completed (nvidia.NVIDIAConfig.Landed).
func (v *VGPU) landed(off, n uint64) {
	if f := v.wroteHook.Load(); f != nil {
		(*f)(off, n)
	}
}
