package mmio

import (
	"encoding/binary"
	"sync"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/engine"
)

// Engine is the part of the command engine that registers reach.
type Engine interface {
	Regs() engine.Regs
	SetRingBase(ga uint64)
	SetRingSize(n uint32)
	SetEnabled(on bool) error
	Doorbell(tail uint32) error
	// Stream and ClearStreamError serve the stream registers (ABI 1.2,
	// abi.CapStreams): stream id's error code and last fence.
	Stream(id uint32) (code uint32, fence uint64)
	ClearStreamError(id uint32)
}

// GTT is the guest GTT as the GTT window sees it.
type GTT interface {
	Entries() uint32
	Read(index uint32) (uint64, error)
	Write(index uint32, entry uint64) error
}

// Config wires a RegisterFile to the rest of its vGPU.
type Config struct {
	MemSize uint64
	// LocalMemSize is the device-local memory LOCAL_MEM_SIZE reads (ABI
	// 1.2); 0 on a vGPU without it, which reads 0 there as before.
	LocalMemSize uint64
	// DeviceAddrBase, if set, answers DEVICE_ADDR_BASE (ABI 1.3): the
	// back end's device address of device-local byte 0, which a restore
	// may change (engine.Backend.DeviceAddrBase). Unset reads 0.
	DeviceAddrBase func() uint64
	// Caps are CAPS bits beyond DefaultCaps that this vGPU's back end
	// offers (abi.CapModules).
	Caps   uint32
	Engine Engine
	GTT    GTT
	// Notify is called, with the register file locked, whenever the set of
	// pending unmasked interrupt causes may have changed: pending is
	// INT_STATUS & INT_MASK, rising the causes that just became pending.
	Notify func(pending, rising uint32)
	// Reset is called (unlocked) when the guest writes CONTROL.RESET.
	Reset func()
	// Heartbeat is called (unlocked) after each write to HEARTBEAT.
	Heartbeat func(value uint64)
	// Interrupts, if set, is called (locked) whenever INT_STATUS or
	// INT_MASK changes, with their new values (the API log records them).
	Interrupts func(status, mask uint32)
}

// DefaultCaps are the CAPS bits every vGPU has (docs/device-abi.md §3).
const DefaultCaps = abi.CapKernels | abi.CapFenceMem | abi.CapHeartbeat

// State is the register file's own state (docs/device-abi.md §3): plain data.
type State struct {
	IntStatus     uint32
	IntMask       uint32
	ErrStatus     uint32
	ErrGTTIndex   uint32
	ErrRingOffset uint32
	ErrOpcode     uint32
	Heartbeat     uint64
	Scratch       uint32
}

// RegisterFile decodes and dispatches BAR0 accesses.
type RegisterFile struct {
	cfg Config

	mu sync.Mutex
	st State
}

// New returns a register file in its reset state.
func New(cfg Config) *RegisterFile {
	if cfg.Notify == nil {
		cfg.Notify = func(uint32, uint32) {}
	}
	return &RegisterFile{cfg: cfg}
}

// register describes one entry of the dispatch table. read and write see the
// whole register (64 bits for wide ones); write is nil for read-only
// registers.
type register struct {
	wide  bool
	read  func(f *RegisterFile) uint64
	write func(f *RegisterFile, v uint64)
}

// registers is the dispatch table, by BAR0 offset (docs/device-abi.md §3).
var registers = map[uint32]register{
	abi.RegID:           {read: constant(abi.IDMagic)},
	abi.RegVersion:      {read: constant(abi.Version)},
	abi.RegCaps:         {read: func(f *RegisterFile) uint64 { return uint64(DefaultCaps | f.cfg.Caps) }},
	abi.RegMemSize:      {wide: true, read: func(f *RegisterFile) uint64 { return f.cfg.MemSize }},
	abi.RegLocalMemSize: {wide: true, read: func(f *RegisterFile) uint64 { return f.cfg.LocalMemSize }},
	abi.RegDeviceAddrBase: {wide: true, read: func(f *RegisterFile) uint64 {
		if f.cfg.DeviceAddrBase == nil {
			return 0
		}
		return f.cfg.DeviceAddrBase()
	}},
	abi.RegGTTEntries: {read: func(f *RegisterFile) uint64 {
		return uint64(f.cfg.GTT.Entries())
	}},
	abi.RegGTTOffset: {read: constant(abi.GTTOffset)},
	abi.RegRingBase: {wide: true,
		read:  func(f *RegisterFile) uint64 { return f.cfg.Engine.Regs().RingBase },
		write: func(f *RegisterFile, v uint64) { f.cfg.Engine.SetRingBase(v) }},
	abi.RegRingSize: {
		read:  func(f *RegisterFile) uint64 { return uint64(f.cfg.Engine.Regs().RingSize) },
		write: func(f *RegisterFile, v uint64) { f.cfg.Engine.SetRingSize(uint32(v)) }},
	abi.RegRingHead: {read: func(f *RegisterFile) uint64 { return uint64(f.cfg.Engine.Regs().Head) }},
	abi.RegRingTail: {read: func(f *RegisterFile) uint64 { return uint64(f.cfg.Engine.Regs().Tail) }},
	abi.RegDoorbell: {read: constant(0), write: (*RegisterFile).writeDoorbell},
	abi.RegControl:  {read: (*RegisterFile).readControl, write: (*RegisterFile).writeControl},
	abi.RegStatus:   {read: (*RegisterFile).readStatus},
	abi.RegFenceDone: {wide: true, read: func(f *RegisterFile) uint64 {
		return f.cfg.Engine.Regs().FenceDone
	}},
	abi.RegIntStatus: {read: field(func(s *State) *uint32 { return &s.IntStatus }),
		write: func(f *RegisterFile, v uint64) { f.update(func(s *State) { s.IntStatus &^= uint32(v) }) }},
	abi.RegIntMask: {read: field(func(s *State) *uint32 { return &s.IntMask }),
		write: func(f *RegisterFile, v uint64) { f.update(func(s *State) { s.IntMask = uint32(v) }) }},
	abi.RegErrStatus: {read: field(func(s *State) *uint32 { return &s.ErrStatus }),
		write: func(f *RegisterFile, v uint64) { f.update(func(s *State) { s.ErrStatus &^= uint32(v) }) }},
	abi.RegErrGTTIndex:   {read: field(func(s *State) *uint32 { return &s.ErrGTTIndex })},
	abi.RegErrRingOffset: {read: field(func(s *State) *uint32 { return &s.ErrRingOffset })},
	abi.RegErrOpcode:     {read: field(func(s *State) *uint32 { return &s.ErrOpcode })},
	abi.RegHeartbeat:     {wide: true, read: (*RegisterFile).readHeartbeat, write: (*RegisterFile).writeHeartbeat},
	abi.RegCmdsDone: {wide: true, read: func(f *RegisterFile) uint64 {
		return f.cfg.Engine.Regs().CmdsDone
	}},
	abi.RegScratch: {read: field(func(s *State) *uint32 { return &s.Scratch }),
		write: func(f *RegisterFile, v uint64) { f.update(func(s *State) { s.Scratch = uint32(v) }) }},
}

// The stream registers (docs/device-abi.md §5.1, ABI 1.2): answered by the
// engine on a vGPU with abi.CapStreams, 0 and no effect on any other, as
// unlisted offsets are.
func init() {
	for i := range uint32(abi.MaxStreams) {
		registers[abi.RegStreamErr+4*i] = register{
			read: func(f *RegisterFile) uint64 {
				code, _ := f.streams().Stream(i)
				return uint64(code)
			},
			write: func(f *RegisterFile, _ uint64) { f.streams().ClearStreamError(i) },
		}
		registers[abi.RegStreamFence+8*i] = register{wide: true, read: func(f *RegisterFile) uint64 {
			_, fence := f.streams().Stream(i)
			return fence
		}}
	}
}

// streams is the engine, or no streams at all without abi.CapStreams.
func (f *RegisterFile) streams() interface {
	Stream(id uint32) (uint32, uint64)
	ClearStreamError(id uint32)
} {
	if f.cfg.Caps&abi.CapStreams == 0 {
		return noStreams{}
	}
	return f.cfg.Engine
}

type noStreams struct{}

func (noStreams) Stream(uint32) (uint32, uint64) { return 0, 0 }
func (noStreams) ClearStreamError(uint32)        {}

func constant(v uint64) func(*RegisterFile) uint64 {
	return func(*RegisterFile) uint64 { return v }
}

// field reads a 32-bit field of State under the lock.
func field(sel func(*State) *uint32) func(*RegisterFile) uint64 {
	return func(f *RegisterFile) uint64 {
		f.mu.Lock()
		defer f.mu.Unlock()
		return uint64(*sel(&f.st))
	}
}

// update changes State under the lock and re-evaluates the interrupt line.
func (f *RegisterFile) update(change func(*State)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	status, mask := f.st.IntStatus, f.st.IntMask
	change(&f.st)
	if f.cfg.Interrupts != nil && (f.st.IntStatus != status || f.st.IntMask != mask) {
		f.cfg.Interrupts(f.st.IntStatus, f.st.IntMask)
	}
	f.notifyLocked(status & mask)
}

func (f *RegisterFile) notifyLocked(before uint32) {
	pending := f.st.IntStatus & f.st.IntMask
	f.cfg.Notify(pending, pending&^before)
}

// Read serves a guest read of len(p) bytes at BAR0 offset off. Unsupported
// accesses read as all ones and set ERR_STATUS.MMIO; they are not errors to
// the transport, as on real hardware.
func (f *RegisterFile) Read(off uint64, p []byte) error {
	if off >= abi.GTTOffset {
		return f.readGTT(off-abi.GTTOffset, p)
	}
	if !aligned(off, len(p)) {
		return f.badAccess(p)
	}
	switch {
	case off >= abi.RegsEnd:
		clear(p)
	case len(p) == 8 && isWide(uint32(off)):
		binary.LittleEndian.PutUint64(p, registers[uint32(off)].read(f))
	default:
		for i := 0; i < len(p); i += 4 {
			binary.LittleEndian.PutUint32(p[i:], f.read32(uint32(off)+uint32(i)))
		}
	}
	return nil
}

// Write serves a guest write of p at BAR0 offset off.
func (f *RegisterFile) Write(off uint64, p []byte) error {
	if off >= abi.GTTOffset {
		return f.writeGTT(off-abi.GTTOffset, p)
	}
	if !aligned(off, len(p)) {
		return f.badAccess(nil)
	}
	switch {
	case off >= abi.RegsEnd:
	case len(p) == 8 && isWide(uint32(off)):
		if r := registers[uint32(off)]; r.write != nil {
			r.write(f, binary.LittleEndian.Uint64(p))
		}
	default:
		for i := 0; i < len(p); i += 4 {
			f.write32(uint32(off)+uint32(i), binary.LittleEndian.Uint32(p[i:]))
		}
	}
	return nil
}

// aligned reports whether an access is 4 or 8 bytes and naturally aligned.
func aligned(off uint64, n int) bool {
	return (n == 4 || n == 8) && off%uint64(n) == 0
}

func isWide(off uint32) bool {
	r, ok := registers[off]
	return ok && r.wide
}

// read32 reads the 32-bit register at off, or a half of a 64-bit one.
func (f *RegisterFile) read32(off uint32) uint32 {
	if r, ok := registers[off]; ok {
		return uint32(r.read(f))
	}
	if r, ok := registers[off-4]; ok && r.wide && off >= 4 {
		return uint32(r.read(f) >> 32)
	}
	return 0
}

// write32 writes the 32-bit register at off, or merges into a half of a
// 64-bit one.
func (f *RegisterFile) write32(off uint32, v uint32) {
	if r, ok := registers[off]; ok && r.write != nil {
		if r.wide {
			r.write(f, r.read(f)&^0xffffffff|uint64(v))
		} else {
			r.write(f, uint64(v))
		}
		return
	}
	if r, ok := registers[off-4]; ok && r.wide && r.write != nil && off >= 4 {
		r.write(f, r.read(f)&0xffffffff|uint64(v)<<32)
	}
}

func (f *RegisterFile) badAccess(p []byte) error {
	for i := range p {
		p[i] = 0xff
	}
	f.SetError(abi.ErrMMIO, func(*State) {})
	return nil
}
