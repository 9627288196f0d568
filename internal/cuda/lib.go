package cuda

import (
	"fmt"
	"reflect"
	"sync"
	"unsafe"

	"github.com/ebitengine/purego"
)

// LibraryName is the driver library, the soname the NVIDIA driver installs.
const LibraryName = "libcuda.so.1"

// funcs are the driver entry points, bound by name. The _v2 names are the
// ones cuda.h maps the unversioned names to (CUDA >= 3.2 ABI).
type funcs struct {
	cuInit                         func(flags uint32) Result
	cuDriverGetVersion             func(v *int32) Result
	cuGetErrorName                 func(r Result, p **byte) Result
	cuGetErrorString               func(r Result, p **byte) Result
	cuDeviceGetCount               func(n *int32) Result
	cuDeviceGet                    func(dev *int32, ordinal int32) Result
	cuDeviceGetName                func(name *byte, n int32, dev int32) Result
	cuDeviceGetAttribute           func(v *int32, attr int32, dev int32) Result
	cuDeviceTotalMem               func(bytes *uint64, dev int32) Result
	cuDeviceGetUuid                func(uuid *[16]byte, dev int32) Result
	cuDevicePrimaryCtxRetain       func(ctx *uintptr, dev int32) Result
	cuCtxSetCurrent                func(ctx uintptr) Result
	cuCtxSynchronize               func() Result
	cuMemGetInfo                   func(free, total *uint64) Result
	cuMemAlloc                     func(p *DevPtr, size uintptr) Result
	cuMemFree                      func(p DevPtr) Result
	cuMemAllocHost                 func(p *unsafe.Pointer, size uintptr) Result
	cuMemFreeHost                  func(p unsafe.Pointer) Result
	cuMemHostRegister              func(p unsafe.Pointer, size uintptr, flags uint32) Result
	cuMemHostUnregister            func(p unsafe.Pointer) Result
	cuMemHostGetDevicePointer      func(d *DevPtr, p unsafe.Pointer, flags uint32) Result
	cuMemcpyHtoDAsync              func(dst DevPtr, src unsafe.Pointer, n uintptr, s Stream) Result
	cuMemcpyDtoHAsync              func(dst unsafe.Pointer, src DevPtr, n uintptr, s Stream) Result
	cuMemcpyDtoDAsync              func(dst, src DevPtr, n uintptr, s Stream) Result
	cuMemsetD8Async                func(dst DevPtr, v uint8, n uintptr, s Stream) Result
	cuMemsetD32Async               func(dst DevPtr, v uint32, n uintptr, s Stream) Result
	cuMemAddressReserve            func(p *DevPtr, size, align uintptr, addr DevPtr, flags uint64) Result
	cuMemAddressFree               func(p DevPtr, size uintptr) Result
	cuMemCreate                    func(h *MemHandle, size uintptr, prop *allocProp, flags uint64) Result
	cuMemRelease                   func(h MemHandle) Result
	cuMemMap                       func(p DevPtr, size, offset uintptr, h MemHandle, flags uint64) Result
	cuMemUnmap                     func(p DevPtr, size uintptr) Result
	cuMemSetAccess                 func(p DevPtr, size uintptr, desc *accessDesc, count uintptr) Result
	cuMemGetAllocationGranularity  func(g *uintptr, prop *allocProp, option int32) Result
	cuStreamCreate                 func(s *Stream, flags uint32) Result
	cuStreamDestroy                func(s Stream) Result
	cuStreamSynchronize            func(s Stream) Result
	cuModuleLoadDataEx             func(m *Module, image unsafe.Pointer, n uint32, opts *int32, vals *uintptr) Result
	cuModuleUnload                 func(m Module) Result
	cuModuleGetFunction            func(f *Function, m Module, name string) Result
	cuLaunchKernel                 func(f Function, gx, gy, gz, bx, by, bz, shmem uint32, s Stream, params unsafe.Pointer, extra unsafe.Pointer) Result
	cuFuncGetAttribute             func(v *int32, attr int32, f Function) Result
	cuOccupancyMaxPotentialBlockSz func(minGrid, block *int32, f Function, cb uintptr, dynSmem uintptr, limit int32) Result
}

// symbolNames maps funcs' fields to the driver's exported names where they
// differ from the field name.
var symbolNames = map[string]string{
	"cuDeviceTotalMem":               "cuDeviceTotalMem_v2",
	"cuDeviceGetUuid":                "cuDeviceGetUuid_v2",
	"cuMemGetInfo":                   "cuMemGetInfo_v2",
	"cuMemAlloc":                     "cuMemAlloc_v2",
	"cuMemFree":                      "cuMemFree_v2",
	"cuMemAllocHost":                 "cuMemAllocHost_v2",
	"cuMemHostRegister":              "cuMemHostRegister_v2",
	"cuMemHostGetDevicePointer":      "cuMemHostGetDevicePointer_v2",
	"cuMemcpyHtoDAsync":              "cuMemcpyHtoDAsync_v2",
	"cuMemcpyDtoHAsync":              "cuMemcpyDtoHAsync_v2",
	"cuMemcpyDtoDAsync":              "cuMemcpyDtoDAsync_v2",
	"cuStreamDestroy":                "cuStreamDestroy_v2",
	"cuOccupancyMaxPotentialBlockSz": "cuOccupancyMaxPotentialBlockSize",
}

// Driver is the loaded driver library, initialised (cuInit).
type Driver struct {
	lib     uintptr
	fn      funcs
	version int

	mu      sync.Mutex
	devices map[int]*Device
}

var (
	openOnce sync.Once
	opened   *Driver
	openErr  error
)

// Open loads libcuda.so.1 and initialises the driver, once per process. It
// fails with ErrNoDriver when the library is absent or incomplete and with
// ErrNoDevice when cuInit finds no GPU; both are normal on machines without
// one.
func Open() (*Driver, error) {
	openOnce.Do(func() { opened, openErr = open() })
	return opened, openErr
}

func open() (*Driver, error) {
	lib, err := purego.Dlopen(LibraryName, purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoDriver, err)
	}
	d := &Driver{lib: lib, devices: map[int]*Device{}}
	if err := d.bind(); err != nil {
		return nil, err
	}
	if r := d.fn.cuInit(0); r != Success {
		if r == ErrorNoDevice {
			return nil, fmt.Errorf("%w: %v", ErrNoDevice, d.err("cuInit", r))
		}
		return nil, fmt.Errorf("%w: %w", ErrNoDriver, d.err("cuInit", r))
	}
	var v int32
	if r := d.fn.cuDriverGetVersion(&v); r != Success {
		return nil, d.err("cuDriverGetVersion", r)
	}
	d.version = int(v)
	return d, nil
}

// bind resolves every field of d.fn, failing with ErrNoDriver (naming the
// symbols) if any is missing, rather than panicking as purego would.
func (d *Driver) bind() error {
	if missing := bindFuncs(d.lib, &d.fn, symbolNames); len(missing) > 0 {
		return fmt.Errorf("%w: %s lacks %v", ErrNoDriver, LibraryName, missing)
	}
	return nil
}

// bindFuncs binds every func field of the struct *fns to the symbol of lib
// named like the field (or as names says) and returns the symbols it did
// not find. The fields may be unexported.
func bindFuncs(lib uintptr, fns any, names map[string]string) (missing []string) {
	v := reflect.ValueOf(fns).Elem()
	t := v.Type()
	for i := range t.NumField() {
		name := t.Field(i).Name
		if n, ok := names[name]; ok {
			name = n
		}
		sym, err := purego.Dlsym(lib, name)
		if err != nil || sym == 0 {
			missing = append(missing, name)
			continue
		}
		f := v.Field(i)
		purego.RegisterFunc(reflect.NewAt(f.Type(), unsafe.Pointer(f.UnsafeAddr())).Interface(), sym)
	}
	return missing
}

// Version is the driver's CUDA version, 1000*major + 10*minor (13000 for 13.0).
func (d *Driver) Version() int { return d.version }

// DeviceCount is the number of CUDA devices the driver sees.
func (d *Driver) DeviceCount() (int, error) {
	var n int32
	if r := d.fn.cuDeviceGetCount(&n); r != Success {
		return 0, d.err("cuDeviceGetCount", r)
	}
	return int(n), nil
}
