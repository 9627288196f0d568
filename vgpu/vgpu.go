package vgpu

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/gtt"
	"github.com/gmig-dev/gmig/internal/apilog"
	"github.com/gmig-dev/gmig/internal/pci"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/mmio"
	"github.com/gmig-dev/gmig/vfio"
)

// Defaults for Config fields left zero.
const (
	DefaultMemSize = 64 << 20
	MinMemSize     = 1 << 20
)

// Config names a vGPU, says what it is and hooks it up. What it is (size,
// GTT, back end, guest modules) is a Spec's fields: VGPU.Spec gives them,
// defaults applied and with the CAPS they make; Spec.Config turns a Spec
// back into a Config.
type Config struct {
	Name       string // for logs and the control API
	MemSize    uint64 // graphics memory bytes: a power of two ≥ MinMemSize (default DefaultMemSize)
	GTTEntries uint32 // default abi.GTTMaxEntries
	// OnHeartbeat, if set, is called with each value the guest writes to
	// HEARTBEAT and the host time of the write.
	OnHeartbeat func(value uint64, at time.Time)
	// Backend runs the vGPU's commands: BackendSoftware (the default) or
	// BackendCUDA (an NVIDIA GPU; backend.go).
	Backend string `json:"backend,omitempty"`
	// GuestModules lets the guest load its own PTX (ABI 1.1, CUDA back
	// end only; docs/nvidia.md, "Isolation").
	GuestModules bool `json:"guest_modules,omitempty"`
	// GPU is the CUDA ordinal of the GPU the cuda back end runs on
	// (default GPUOrdinal). It is this host's choice (gmigd serve -gpu),
	// not part of the vGPU's Spec: an arriving vGPU lands on the
	// destination's GPU.
	GPU int `json:"-"`
	// LocalMemSize is the device-local memory (ABI 1.2,
	// docs/device-abi.md §1.3): a multiple of 4096 bytes, 0 (the default)
	// for none. On the cuda back end it lives on the GPU alone.
	LocalMemSize uint64 `json:"local_mem_size,omitempty"`
	// GPUIsolation is where a cuda vGPU's GPU context lives:
	// IsolationProcess (the default; a GPU worker process of its own) or
	// IsolationShared (gmigd's; docs/nvidia.md, "Isolation"). Like GPU it
	// is this host's choice, not part of the Spec: an arriving vGPU gets
	// the destination's default. A software vGPU has none ("").
	GPUIsolation string `json:"gpu_isolation,omitempty"`
}

// ErrConfig reports an invalid Config.
var ErrConfig = errors.New("vgpu: invalid config")

func (c Config) withDefaults() (Config, error) {
	if c.MemSize == 0 {
		c.MemSize = DefaultMemSize
	}
	if c.GTTEntries == 0 {
		c.GTTEntries = abi.GTTMaxEntries
	}
	switch {
	case c.MemSize < MinMemSize || c.MemSize&(c.MemSize-1) != 0:
		return c, fmt.Errorf("%w: memory size %d is not a power of two ≥ %d", ErrConfig, c.MemSize, MinMemSize)
	case c.GTTEntries > abi.GTTMaxEntries:
		return c, fmt.Errorf("%w: %d GTT entries, at most %d", ErrConfig, c.GTTEntries, abi.GTTMaxEntries)
	case c.LocalMemSize%abi.PageSize != 0:
		return c, fmt.Errorf("%w: local memory size %d is not a multiple of %d", ErrConfig, c.LocalMemSize, abi.PageSize)
	}
	return c.backendDefaults()
}

// Stats counts what the vGPU has done since it was created.
type Stats struct {
	Fences       uint64 // fences retired
	Faults       uint64 // failed commands
	BytesWritten uint64 // graphics-memory bytes the engine wrote
	Heartbeats   uint64 // guest heartbeat writes
}

// VGPU is one mediated virtual GPU.
type VGPU struct {
	cfg  Config
	log  zerolog.Logger
	pool *pool.Pool
	part pool.Partition
	mem  []byte   // the partition's graphics memory in the pool mapping
	loc  []byte   // its device-local memory, right after mem (empty without)
	dev  []byte   // mem and loc as one slice (DeviceMemory)
	file *os.File // the partition's memfd, the aperture's backing; the pool owns it

	pci    *pci.Config
	regs   *mmio.RegisterFile
	gtt    *gtt.Table
	eng    *engine.Engine
	dma    *vfio.DMATable
	irqs   *vfio.IRQTable
	apiLog *apilog.Log        // what memory hashes cannot capture, for migration
	gpu    nvidia.VGPUBackend // the CUDA back end, nil for software (backend.go)

	fences, faults, written, beats atomic.Uint64
	wroteHook                      atomic.Pointer[func(off, n uint64)]
	ram                            guestRAM // what the engine DMAs guest RAM through

	// memMu orders trapped aperture accesses and RegionInfo against Close,
	// which unmaps mem: a client still connected to a closed vGPU gets
	// errors, never another vGPU's memory or a fault in gmigd.
	memMu     sync.RWMutex
	closed    bool // under memMu
	closeOnce sync.Once
}

// New creates a vGPU in a fresh partition of p, in its power-on state.
func New(cfg Config, p *pool.Pool, log zerolog.Logger) (*VGPU, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	part, err := p.AllocLocal(cfg.MemSize, cfg.LocalMemSize)
	if err != nil {
		return nil, fmt.Errorf("vgpu %s: allocating %d bytes of graphics memory and %d of local memory: %w",
			cfg.Name, cfg.MemSize, cfg.LocalMemSize, err)
	}
	v, err := build(cfg, p, part, log)
	if err != nil {
		_ = p.Free(part)
		return nil, err
	}
	v.log.Info().Uint64("mem_size", cfg.MemSize).Uint64("local_mem_size", cfg.LocalMemSize).Uint64("pool_offset", part.Offset).
		Uint32("gtt_entries", cfg.GTTEntries).Msg("vgpu created")
	return v, nil
}

// build wires the parts of a vGPU around an allocated partition.
func build(cfg Config, p *pool.Pool, part pool.Partition, log zerolog.Logger) (*VGPU, error) {
	file, err := p.File(part)
	if err != nil {
		return nil, fmt.Errorf("vgpu %s: graphics memory: %w", cfg.Name, err)
	}
	v := &VGPU{
		cfg:    cfg,
		log:    log.With().Str("vgpu", cfg.Name).Logger(),
		pool:   p,
		part:   part,
		mem:    p.Slice(part),
		loc:    p.LocalSlice(part),
		dev:    deviceSlice(p, part),
		file:   file,
		dma:    vfio.NewDMATable(),
		irqs:   vfio.NewIRQTable(),
		apiLog: apilog.New(),
	}
	if v.pci, err = pci.New(identity, bars(cfg.MemSize), true); err != nil {
		return nil, fmt.Errorf("vgpu %s: config space: %w", cfg.Name, err)
	}
	if v.gtt, err = gtt.NewWithLocal(cfg.GTTEntries, part.Offset, part.Pages(), part.LocalPages()); err != nil {
		return nil, fmt.Errorf("vgpu %s: GTT: %w", cfg.Name, err)
	}
	be, err := v.newBackend(p.Mem(), part)
	if err != nil {
		return nil, err
	}
	v.ram.dma = v.dma
	v.eng = engine.New(engine.Config{
		Backend: be,
		GTT:     v.gtt,
		RAM:     &v.ram,
		Events:  events{v},
		Log:     v.log,
		Streams: cfg.caps()&abi.CapStreams != 0,
		// Device-local memory sits right after the aperture in the
		// partition, where the GTT's local pages name it.
		Local: gtt.Extent{Off: part.ApertureEnd(), Len: part.Local},
	})
	v.regs = mmio.New(mmio.Config{
		MemSize:        cfg.MemSize,
		LocalMemSize:   cfg.LocalMemSize,
		DeviceAddrBase: be.DeviceAddrBase,
		Caps:           cfg.caps() &^ mmio.DefaultCaps,
		Engine:         v.eng,
		GTT:            v.gtt,
		Notify:         v.deliver,
		Reset:          func() { v.reset() },
		Heartbeat:      v.heartbeat,
		Interrupts: func(status, mask uint32) {
			v.apiLog.Record(apilog.Entry{Kind: apilog.Interrupts, Handle: status, Arg: mask})
		},
	})
	v.eng.Start()
	return v, nil
}

// identity is the PCI identity of every gmig vGPU (docs/device-abi.md §2).
var identity = pci.Identity{
	VendorID:     abi.PCIVendorID,
	DeviceID:     abi.PCIDeviceID,
	SubVendorID:  abi.PCISubVendorID,
	SubDeviceID:  abi.PCISubDeviceID,
	Revision:     abi.PCIRevision,
	ClassCode:    abi.PCIClassCode,
	InterruptPin: abi.PCIInterruptPin,
}

func bars(memSize uint64) [6]pci.BAR {
	var b [6]pci.BAR
	b[abi.BARRegs] = pci.BAR{Size: abi.BAR0Size}
	b[abi.BARAperture] = pci.BAR{Size: memSize, Mem64: true, Prefetchable: true}
	return b
}

// Name returns the vGPU's name.
func (v *VGPU) Name() string { return v.cfg.Name }

// Config returns the vGPU's configuration, defaults applied.
func (v *VGPU) Config() Config { return v.cfg }

// Partition returns where the vGPU's graphics memory lives in the pool.
func (v *VGPU) Partition() pool.Partition { return v.part }

// Memory returns the vGPU's graphics memory (aperture page p at p*4096):
// its partition of the pool mapping. It must not be touched once Close
// has begun: Close unmaps it.
func (v *VGPU) Memory() []byte { return v.mem }

// LocalMemory returns the vGPU's device-local memory (local page p at
// p*4096; docs/device-abi.md §1.3), empty when it has none. It lies right
// after Memory() in the pool mapping and is never handed to a client. Like
// Memory, it must not be touched once Close has begun. On the cuda back
// end local memory lives on the GPU alone: this range is not its content
// and serves only as a migration's receive buffer (whose pages the
// receiver copies to the GPU with the back end's LoadLocal).
func (v *VGPU) LocalMemory() []byte { return v.loc }

// DeviceMemory is Memory followed by LocalMemory, as one slice: device
// page p is graphics page p below MemSize/4096 and local page
// p - MemSize/4096 from there (the page numbering a migration stream uses,
// docs/migration-stream.md §4).
func (v *VGPU) DeviceMemory() []byte { return v.dev }

// deviceSlice is part's graphics and local memory in p's mapping.
func deviceSlice(p *pool.Pool, part pool.Partition) []byte {
	return p.Mem()[part.Offset:part.End():part.End()]
}

// Stats returns the vGPU's counters.
func (v *VGPU) Stats() Stats {
	return Stats{
		Fences:       v.fences.Load(),
		Faults:       v.faults.Load(),
		BytesWritten: v.written.Load(),
		Heartbeats:   v.beats.Load(),
	}
}

// ErrObserved reports a vGPU whose engine writes are already observed: one
// migration at a time.
var ErrObserved = errors.New("vgpu: engine writes already observed (a migration is in progress)")

// ObserveWrites makes the engine report every graphics-memory range it
// writes to f, as byte offsets into DeviceMemory() (at or past MemSize:
// device-local memory), until ObserveWrites(nil); the guest's trapped
// aperture stores (vfio-user region writes, which gmigd performs) are
// reported the same way. f is called from the engine goroutine or the
// vfio-user server's and must be quick (a dirty tracker's
// MarkWritten). There is one observer at a time: setting a second fails
// with ErrObserved.
func (v *VGPU) ObserveWrites(f func(off, n uint64)) error {
	if f == nil {
		v.wroteHook.Store(nil)
		return nil
	}
	if !v.wroteHook.CompareAndSwap(nil, &f) {
		return ErrObserved
	}
	return nil
}

// APILog returns the vGPU's API log: kernel objects, the last fence, the
// interrupt state and the guest's config writes, compacted as recorded.
func (v *VGPU) APILog() *apilog.Log { return v.apiLog }

// Engine returns the vGPU's engine, for quiescing and inspection.
func (v *VGPU) Engine() *engine.Engine { return v.eng }

// Serve runs the vfio-user server for this vGPU on l until ctx is
// cancelled. One client is served at a time; a client that goes away leaves
// the device as it was for the next.
func (v *VGPU) Serve(ctx context.Context, l *net.UnixListener) error {
	return v.ServeDevice(ctx, l, v)
}

// ServeDevice is Serve for dev, a device built around this vGPU (one that
// embeds it and adds vfio.Migrator, for instance): the server hosts dev
// with this vGPU's DMA and IRQ tables, the ones its engine and interrupts
// use.
func (v *VGPU) ServeDevice(ctx context.Context, l *net.UnixListener, dev vfio.Device) error {
	srv := vfio.NewServer(vfio.ServerConfig{
		Device: dev,
		DMA:    v.dma,
		IRQs:   v.irqs,
		Log:    v.log,
	})
	return srv.Serve(ctx, l)
}

// Close stops the engine, drops DMA mappings and interrupts, and returns the
// partition to the pool, which unmaps it and closes its memfd: a client
// still mapping the aperture keeps those pages, which no other vGPU ever
// gets. The vGPU is unusable afterwards: a client still connected gets
// errors for the aperture, and Memory must no longer be touched.
func (v *VGPU) Close() error {
	var err error
	v.closeOnce.Do(func() {
		v.eng.Close()
		v.closeBackend()
		v.dma.UnmapAll()
		v.irqs.Close()
		v.memMu.Lock()
		v.closed = true
		if ferr := v.pool.Free(v.part); ferr != nil {
			err = fmt.Errorf("vgpu %s: freeing partition: %w", v.cfg.Name, ferr)
		}
		v.memMu.Unlock()
		v.log.Info().Msg("vgpu closed")
	})
	return err
}

func (v *VGPU) heartbeat(value uint64) {
	v.beats.Add(1)
	if v.cfg.OnHeartbeat != nil {
		v.cfg.OnHeartbeat(value, time.Now())
	}
}

// ErrClosed is returned for aperture accesses to a closed vGPU.
var ErrClosed = errors.New("vgpu: closed")

// withMemory runs f on graphics memory, unless the vGPU is closed; Close
// waits for f to return before it unmaps the memory.
func (v *VGPU) withMemory(f func(mem []byte)) error {
	v.memMu.RLock()
	defer v.memMu.RUnlock()
	if v.closed {
		return fmt.Errorf("vgpu %s: %w", v.cfg.Name, ErrClosed)
	}
	f(v.mem)
	return nil
}
