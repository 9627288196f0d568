package mmio

import (
	"encoding/binary"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/engine"
)

func (f *RegisterFile) writeDoorbell(v uint64) {
	if err := f.cfg.Engine.Doorbell(uint32(v)); err != nil {
		f.SetError(abi.ErrDoorbell, func(*State) {})
	}
}

func (f *RegisterFile) readControl() uint64 {
	if f.cfg.Engine.Regs().Enabled {
		return abi.ControlEnable
	}
	return 0
}

func (f *RegisterFile) writeControl(v uint64) {
	if v&abi.ControlReset != 0 {
		if f.cfg.Reset != nil {
			f.cfg.Reset()
		}
		return
	}
	on := v&abi.ControlEnable != 0
	if on == f.cfg.Engine.Regs().Enabled {
		return
	}
	if err := f.cfg.Engine.SetEnabled(on); err != nil {
		f.SetError(abi.ErrRing, func(*State) {})
	}
}

func (f *RegisterFile) readStatus() uint64 {
	r := f.cfg.Engine.Regs()
	var s uint64
	if r.Enabled {
		s |= abi.StatusEnabled
	}
	if r.Busy {
		s |= abi.StatusBusy
	}
	return s
}

func (f *RegisterFile) readHeartbeat() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.Heartbeat
}

func (f *RegisterFile) writeHeartbeat(v uint64) {
	f.mu.Lock()
	f.st.Heartbeat = v
	f.mu.Unlock()
	if f.cfg.Heartbeat != nil {
		f.cfg.Heartbeat(v)
	}
}

// readGTT serves reads of the GTT window at window offset off: 4-byte halves
// or any number of whole 8-byte entries.
func (f *RegisterFile) readGTT(off uint64, p []byte) error {
	if !gttAccessOK(off, len(p)) {
		return f.badAccess(p)
	}
	if len(p) == 4 {
		e, err := f.cfg.GTT.Read(uint32(off / abi.GTTEntrySize))
		if err != nil {
			return f.badAccess(p)
		}
		binary.LittleEndian.PutUint32(p, uint32(e>>(8*(off%8))))
		return nil
	}
	first := uint32(off / abi.GTTEntrySize)
	for i := 0; i < len(p); i += abi.GTTEntrySize {
		e, err := f.cfg.GTT.Read(first + uint32(i/abi.GTTEntrySize))
		if err != nil {
			return f.badAccess(p[i:])
		}
		binary.LittleEndian.PutUint64(p[i:], e)
	}
	return nil
}

// writeGTT serves writes to the GTT window: a 4-byte half is merged with the
// entry's other half and the whole entry is checked (docs/device-abi.md
// §3.1); longer writes are whole entries, each checked on its own.
func (f *RegisterFile) writeGTT(off uint64, p []byte) error {
	if !gttAccessOK(off, len(p)) {
		return f.badAccess(nil)
	}
	if len(p) == 4 {
		index := uint32(off / abi.GTTEntrySize)
		cur, err := f.cfg.GTT.Read(index)
		if err != nil {
			return f.badAccess(nil)
		}
		v := uint64(binary.LittleEndian.Uint32(p))
		if off%8 == 0 {
			cur = cur&^0xffffffff | v
		} else {
			cur = cur&0xffffffff | v<<32
		}
		f.writeEntry(index, cur)
		return nil
	}
	first := uint32(off / abi.GTTEntrySize)
	for i := 0; i < len(p); i += abi.GTTEntrySize {
		f.writeEntry(first+uint32(i/abi.GTTEntrySize), binary.LittleEndian.Uint64(p[i:]))
	}
	return nil
}

func (f *RegisterFile) writeEntry(index uint32, e uint64) {
	if index >= f.cfg.GTT.Entries() {
		f.SetError(abi.ErrMMIO, func(*State) {})
		return
	}
	if err := f.cfg.GTT.Write(index, e); err != nil {
		f.SetError(abi.ErrGTTEntry, func(s *State) { s.ErrGTTIndex = index })
	}
}

// gttAccessOK accepts 4-byte aligned halves and 8-byte aligned runs of whole
// entries.
func gttAccessOK(off uint64, n int) bool {
	switch {
	case n == 4:
		return off%4 == 0
	case n > 0 && n%abi.GTTEntrySize == 0:
		return off%abi.GTTEntrySize == 0
	}
	return false
}

// SetError sets ERR_STATUS bit code, lets info fill the error-information
// registers, and raises INT_STATUS.ERROR.
func (f *RegisterFile) SetError(code uint32, info func(*State)) {
	f.update(func(s *State) {
		s.ErrStatus |= code
		info(s)
		s.IntStatus |= abi.IntError
	})
}

// Fault records a failed command reported by the engine.
func (f *RegisterFile) Fault(flt engine.Fault) {
	f.SetError(flt.Code, func(s *State) {
		s.ErrRingOffset = flt.RingOffset
		s.ErrOpcode = uint32(flt.Opcode)
	})
}

// Raise sets interrupt causes in INT_STATUS.
func (f *RegisterFile) Raise(bits uint32) {
	f.update(func(s *State) { s.IntStatus |= bits })
}

// Pending returns INT_STATUS & INT_MASK.
func (f *RegisterFile) Pending() uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st.IntStatus & f.st.IntMask
}

// Renotify re-evaluates the interrupt line without changing state, for when
// the delivery method changed (MSI enabled, INTx disabled).
func (f *RegisterFile) Renotify() {
	f.update(func(*State) {})
}

// Save returns the register file's state.
func (f *RegisterFile) Save() State {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.st
}

// Restore replaces the register file's state and re-evaluates the
// interrupt line.
func (f *RegisterFile) Restore(s State) {
	f.update(func(st *State) { *st = s })
}

// Reset returns every register-file register to its reset value.
func (f *RegisterFile) Reset() {
	f.Restore(State{})
}
