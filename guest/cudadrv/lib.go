package cudadrv

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/guest"
)

// DriverVersion is what cuDriverGetVersion answers: the CUDA_VERSION of the
// cuda.h whose entry points this library implements (12.4).
const DriverVersion = 12040

// DeviceName is the name cuDeviceGetName gives the vGPU.
const DeviceName = "gmig vGPU"

// handleBase is the first handle given out: CUstream 0, 1 and 2 are the
// NULL stream, CU_STREAM_LEGACY and CU_STREAM_PER_THREAD (cuda.h), so no
// object is ever one of them.
const handleBase = 0x100

// Handle names a context, stream, event, module or function to the C side
// (CUcontext, CUstream, ... are opaque pointers there).
type Handle uintptr

// Device is a CUdevice: the ordinal of the one vGPU, 0.
type Device int32

// Thread is the calling OS thread: CUDA keeps a current-context stack per
// thread.
type Thread int

// Config configures a Lib.
type Config struct {
	// Open reaches the vGPU; Init calls it once.
	Open func() (guest.Bus, error)
	// Driver are the guest driver's options.
	Driver guest.Options
	// Memory makes the allocator device memory comes from; nil means
	// device-local memory at device addresses where the vGPU has them
	// (LocalMemory, CAPS bit 6), else the aperture (ApertureMemory).
	Memory func(*guest.Driver) Memory
	// DMACopies stages host copies to and from device-local memory in the
	// library's DMA memory (DMA_TO_GFX/DMA_FROM_GFX) instead of the
	// aperture (COPY); staging.go.
	DMACopies bool
	// StagingChunk is the most bytes a staging slot of a host copy to or
	// from device-local memory holds (staging.go), a multiple of 4096; 0
	// means DefaultStagingChunk. A quarter of the mapped aperture bounds
	// the slots together whatever it says. ParseStagingChunk reads it as
	// GMIG_CUDA_STAGING_CHUNK gives it.
	StagingChunk uint64
	// RingDelay bounds how long a launch waits in the ring before the
	// doorbell is rung for it (batch.go); 0 means DefaultRingDelay.
	RingDelay time.Duration
	// Log receives one line per event that matters (a failure the caller
	// sees only as a CUresult, an unsupported entry point's first call).
	Log zerolog.Logger
}

// Lib is the driver API over one vGPU. It is safe for concurrent use: one
// mutex orders every call, as the one ring orders every command.
type Lib struct {
	cfg Config

	mu          sync.Mutex
	initDone    bool
	initRes     Result
	d           *guest.Driver
	mem         Memory
	pending     bool   // commands submitted since the last fence
	memFences   bool   // fences write the fence slot (CAPS bit 1, wait.go)
	memFence    uint64 // the last fence issued with abi.FenceWriteMem
	seenDone    uint64 // the highest fence value seen retired
	next        Handle
	objs        map[Handle]any // *context, *stream, *event, *module, *function
	allocs      map[uint64]alloc
	primary     *context
	current     map[Thread][]*context
	unsupported map[string]bool
	kernels     uint32 // the last device kernel handle given out
	stage       *staging
	params      *paramArena
	batch       batch
	launchBuf   []byte              // LAUNCH_GRID encoding scratch
	streamUsers [abi.MaxStreams]int // live streams on each device stream id (stream.go)
	hosts       map[uintptr]hostAlloc
}

// alloc is a live cuMemAlloc at a device pointer: its size, graphics
// address and context.
type alloc struct {
	size uint64
	ga   uint64
	ctx  *context
}

// New makes a Lib; nothing touches the device before Init.
func New(cfg Config) *Lib {
	return &Lib{
		cfg:         cfg,
		next:        handleBase,
		objs:        map[Handle]any{},
		allocs:      map[uint64]alloc{},
		current:     map[Thread][]*context{},
		unsupported: map[string]bool{},
		hosts:       map[uintptr]hostAlloc{},
	}
}

// Init is cuInit: it opens the vGPU once; a failure is kept and returned
// again, as the driver does.
func (l *Lib) Init(flags uint32) Result {
	if flags != 0 {
		return ErrInvalidValue
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.initDone {
		return l.initRes
	}
	l.initDone = true
	l.initRes = l.openLocked()
	return l.initRes
}

func (l *Lib) openLocked() Result {
	if l.cfg.Open == nil {
		return l.fail(ErrNoDevice, errors.New("cudadrv: no way to reach a vGPU configured"))
	}
	bus, err := l.cfg.Open()
	if err != nil {
		return l.fail(ErrNoDevice, fmt.Errorf("cudadrv: finding the vGPU: %w", err))
	}
	d, err := guest.Open(bus, l.cfg.Driver)
	if err != nil {
		return l.fail(ErrNoDevice, fmt.Errorf("cudadrv: opening the vGPU: %w", err))
	}
	l.d = d
	if d.FenceMem() {
		if err := d.ClearFenceSlot(); err != nil {
			return l.fail(ErrNoDevice, fmt.Errorf("cudadrv: opening the vGPU: %w", err))
		}
		l.memFences = true
	}
	if l.cfg.Memory != nil {
		l.mem = l.cfg.Memory(d)
	} else if l.mem, err = defaultMemory(d); err != nil {
		return l.fail(ErrNoDevice, fmt.Errorf("cudadrv: opening the vGPU: %w", err))
	}
	l.cfg.Log.Info().Uint64("mem_size", d.MemSize()).Uint64("local_mem_size", d.LocalMemSize()).
		Uint32("caps", d.Caps()).Bool("device_local", !l.mem.CPU()).Bool("memory_fences", l.memFences).
		Uint64("staging_chunk", l.stagingChunk()).Msg("cudadrv: vGPU opened")
	return Success
}

// Driver is the guest driver Init opened (nil before).
func (l *Lib) Driver() *guest.Driver {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.d
}

// fail logs err and returns r.
func (l *Lib) fail(r Result, err error) Result {
	l.cfg.Log.Warn().Err(err).Str("result", r.String()).Msg("cudadrv: call failed")
	return r
}

func (l *Lib) readyLocked() Result {
	if !l.initDone {
		return ErrNotInitialized
	}
	return l.initRes
}

// Unsupported answers an entry point the library does not implement:
// CUDA_ERROR_NOT_SUPPORTED, logged the first time each name is called.
func (l *Lib) Unsupported(name string) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.unsupported[name] {
		l.unsupported[name] = true
		l.cfg.Log.Warn().Str("entry_point", name).Msg("cudadrv: entry point not supported")
	}
	return ErrNotSupported
}

// DriverGetVersion is cuDriverGetVersion (allowed before cuInit).
func (l *Lib) DriverGetVersion() int32 { return DriverVersion }

// DeviceGetCount is cuDeviceGetCount.
func (l *Lib) DeviceGetCount() (int32, Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.readyLocked(); r != Success {
		return 0, r
	}
	return 1, Success
}

// DeviceGet is cuDeviceGet.
func (l *Lib) DeviceGet(ordinal int32) (Device, Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.readyLocked(); r != Success {
		return 0, r
	}
	if ordinal != 0 {
		return 0, ErrInvalidDevice
	}
	return 0, Success
}

func (l *Lib) deviceLocked(dev Device) Result {
	if r := l.readyLocked(); r != Success {
		return r
	}
	if dev != 0 {
		return ErrInvalidDevice
	}
	return Success
}

// DeviceGetName is cuDeviceGetName.
func (l *Lib) DeviceGetName(dev Device) (string, Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.deviceLocked(dev); r != Success {
		return "", r
	}
	return DeviceName, Success
}

// DeviceGetUUID is cuDeviceGetUuid: a hash of what identifies the vGPU to
// its guest (name and memory size), the same on every host it moves to.
func (l *Lib) DeviceGetUUID(dev Device) ([16]byte, Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var u [16]byte
	if r := l.deviceLocked(dev); r != Success {
		return u, r
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s %#x %#x", DeviceName, abi.PCIDeviceID, l.d.MemSize()))
	copy(u[:], sum[:])
	u[6] = u[6]&0x0f | 0x80 // RFC 9562 version 8 (custom), variant 10
	u[8] = u[8]&0x3f | 0x80
	return u, Success
}

// DeviceTotalMem is cuDeviceTotalMem: the device memory allocations come
// from.
func (l *Lib) DeviceTotalMem(dev Device) (uint64, Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.deviceLocked(dev); r != Success {
		return 0, r
	}
	return l.mem.Size(), Success
}

// DeviceGetAttribute is cuDeviceGetAttribute (attributes.go).
func (l *Lib) DeviceGetAttribute(attr int32, dev Device) (int32, Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.deviceLocked(dev); r != Success {
		return 0, r
	}
	return attribute(attr, l.d.Caps()&abi.CapLaunchGrid != 0)
}
