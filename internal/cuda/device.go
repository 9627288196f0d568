package cuda

import (
	"fmt"
	"runtime"
)

// Handles the driver hands out. They are opaque to Go.
type (
	DevPtr    uint64  // CUdeviceptr: a device (or mapped host) address
	Stream    uintptr // CUstream
	Module    uintptr // CUmodule
	Function  uintptr // CUfunction
	MemHandle uint64  // CUmemGenericAllocationHandle
)

// Device attributes gmig reads (cuda.h, enum CUdevice_attribute).
const (
	attrCanMapHostMemory  = 19
	attrPCIBusID          = 33
	attrPCIDeviceID       = 34
	attrUnifiedAddressing = 41
	attrPCIDomainID       = 50
	attrComputeMajor      = 75
	attrComputeMinor      = 76
	attrVMMSupported      = 102 // CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
)

// DeviceInfo describes one GPU.
type DeviceInfo struct {
	Ordinal      int
	Name         string
	UUID         string // as NVML writes it: GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
	TotalMem     uint64
	ComputeMajor int
	ComputeMinor int
	PCIBusID     string // domain:bus:device.0
	VMM          bool   // the virtual-memory-management API is supported
	MapHost      bool   // host memory can be mapped into the device's address space
}

// Device is one GPU with its primary context retained.
type Device struct {
	d    *Driver
	ord  int32
	dev  int32
	ctx  uintptr
	info DeviceInfo
}

// Device returns GPU ordinal with its primary context, retained once per
// process (later calls return the same Device). Release is not needed: the
// context lives as long as the process.
func (d *Driver) Device(ordinal int) (*Device, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if dv, ok := d.devices[ordinal]; ok {
		return dv, nil
	}
	n, err := d.DeviceCount()
	if err != nil {
		return nil, err
	}
	if ordinal < 0 || ordinal >= n {
		return nil, fmt.Errorf("%w: ordinal %d of %d devices", ErrNoDevice, ordinal, n)
	}
	dv := &Device{d: d, ord: int32(ordinal)}
	if r := d.fn.cuDeviceGet(&dv.dev, int32(ordinal)); r != Success {
		return nil, d.err("cuDeviceGet", r)
	}
	if r := d.fn.cuDevicePrimaryCtxRetain(&dv.ctx, dv.dev); r != Success {
		return nil, d.err("cuDevicePrimaryCtxRetain", r)
	}
	if dv.info, err = d.describe(dv.ord, dv.dev); err != nil {
		return nil, err
	}
	d.devices[ordinal] = dv
	return dv, nil
}

// Describe describes GPU ordinal without retaining its context (no device
// memory is taken on it): for choosing a GPU among several.
func (d *Driver) Describe(ordinal int) (DeviceInfo, error) {
	n, err := d.DeviceCount()
	if err != nil {
		return DeviceInfo{}, err
	}
	if ordinal < 0 || ordinal >= n {
		return DeviceInfo{}, fmt.Errorf("%w: ordinal %d of %d devices", ErrNoDevice, ordinal, n)
	}
	var dev int32
	if r := d.fn.cuDeviceGet(&dev, int32(ordinal)); r != Success {
		return DeviceInfo{}, d.err("cuDeviceGet", r)
	}
	return d.describe(int32(ordinal), dev)
}

func (d *Driver) describe(ord, dev int32) (DeviceInfo, error) {
	name := make([]byte, 256)
	if r := d.fn.cuDeviceGetName(&name[0], int32(len(name)), dev); r != Success {
		return DeviceInfo{}, d.err("cuDeviceGetName", r)
	}
	info := DeviceInfo{Ordinal: int(ord), Name: goString(&name[0])}
	if r := d.fn.cuDeviceTotalMem(&info.TotalMem, dev); r != Success {
		return DeviceInfo{}, d.err("cuDeviceTotalMem", r)
	}
	var uuid [16]byte
	if r := d.fn.cuDeviceGetUuid(&uuid, dev); r != Success {
		return DeviceInfo{}, d.err("cuDeviceGetUuid", r)
	}
	info.UUID = FormatUUID(uuid)
	attr := func(a int32) (int, error) {
		var v int32
		if r := d.fn.cuDeviceGetAttribute(&v, a, dev); r != Success {
			return 0, d.err(fmt.Sprintf("cuDeviceGetAttribute(%d)", a), r)
		}
		return int(v), nil
	}
	var vals [8]int
	for i, a := range []int32{attrComputeMajor, attrComputeMinor, attrPCIDomainID, attrPCIBusID, attrPCIDeviceID, attrVMMSupported, attrCanMapHostMemory, attrUnifiedAddressing} {
		v, err := attr(a)
		if err != nil {
			return DeviceInfo{}, err
		}
		vals[i] = v
	}
	info.ComputeMajor, info.ComputeMinor = vals[0], vals[1]
	info.PCIBusID = fmt.Sprintf("%04x:%02x:%02x.0", vals[2], vals[3], vals[4])
	info.VMM = vals[5] != 0
	info.MapHost = vals[6] != 0 && vals[7] != 0
	return info, nil
}

// FormatUUID writes a CUuuid (cuDeviceGetUuid's 16 bytes) as NVML's
// nvmlDeviceGetUUID writes the same GPU's: "GPU-" and the bytes in hex,
// grouped 8-4-4-4-12. Matching the two is how a GPU NVML lists is found
// among CUDA's ordinals, whose order may differ from NVML's indices.
func FormatUUID(u [16]byte) string {
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// Info describes the device.
func (dv *Device) Info() DeviceInfo { return dv.info }

// Driver returns the driver the device belongs to.
func (dv *Device) Driver() *Driver { return dv.d }

// do runs one driver call with the device's context current on the calling
// OS thread (see the package comment).
func (dv *Device) do(op string, call func() Result) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if r := dv.d.fn.cuCtxSetCurrent(dv.ctx); r != Success {
		return dv.d.err("cuCtxSetCurrent", r)
	}
	return dv.d.err(op, call())
}

// MemInfo returns the device's free and total memory.
func (dv *Device) MemInfo() (free, total uint64, err error) {
	err = dv.do("cuMemGetInfo", func() Result { return dv.d.fn.cuMemGetInfo(&free, &total) })
	return free, total, err
}

// Synchronize waits for all work of the context.
func (dv *Device) Synchronize() error {
	return dv.do("cuCtxSynchronize", func() Result { return dv.d.fn.cuCtxSynchronize() })
}

// streamNonBlocking is CU_STREAM_NON_BLOCKING: no implicit ordering with
// the legacy default stream.
const streamNonBlocking = 1

// NewStream creates a stream that does not synchronise with the default
// stream.
func (dv *Device) NewStream() (Stream, error) {
	var s Stream
	err := dv.do("cuStreamCreate", func() Result { return dv.d.fn.cuStreamCreate(&s, streamNonBlocking) })
	return s, err
}

// DestroyStream destroys s once its work is done.
func (dv *Device) DestroyStream(s Stream) error {
	return dv.do("cuStreamDestroy", func() Result { return dv.d.fn.cuStreamDestroy(s) })
}

// Sync waits for the work queued on s. A kernel's asynchronous failure
// (an illegal address, say) surfaces here.
func (dv *Device) Sync(s Stream) error {
	return dv.do("cuStreamSynchronize", func() Result { return dv.d.fn.cuStreamSynchronize(s) })
}
