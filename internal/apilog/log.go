package apilog

import (
	"sort"
	"sync"
)

// Kind says what an Entry records.
type Kind uint8

// Entry kinds. Their numbers are part of the encoding.
const (
	KernelLoad   Kind = 1 // Handle, Arg = kernel kind
	KernelUnload Kind = 2 // Handle
	Fence        Kind = 3 // Value = FENCE_DONE
	Interrupts   Kind = 4 // Handle = INT_STATUS, Arg = INT_MASK
	ConfigWrite  Kind = 5 // Offset, Size (1, 2 or 4), Arg = value
)

func (k Kind) String() string {
	switch k {
	case KernelLoad:
		return "kernel-load"
	case KernelUnload:
		return "kernel-unload"
	case Fence:
		return "fence"
	case Interrupts:
		return "interrupts"
	case ConfigWrite:
		return "config-write"
	}
	return "unknown"
}

// Entry is one recorded call or state change. Fields a kind does not use
// are zero.
type Entry struct {
	Kind   Kind
	Size   uint8  // ConfigWrite: bytes written
	Offset uint16 // ConfigWrite: config-space offset
	Handle uint32 // KernelLoad/Unload: handle; Interrupts: INT_STATUS
	Arg    uint32 // KernelLoad: kind; Interrupts: INT_MASK; ConfigWrite: value
	Value  uint64 // Fence: value
}

// EntrySize is the encoded size of one entry (encode.go).
const EntrySize = 20

// Stats compares what was recorded with what the log keeps.
type Stats struct {
	RawEntries       uint64
	RawBytes         uint64
	CompactedEntries int
	CompactedBytes   int
}

// Log records entries and keeps them compacted.
type Log struct {
	mu      sync.Mutex
	raw     uint64
	kernels map[uint32]uint32 // live kernel objects: handle -> kind
	order   map[uint32]uint64 // handle -> sequence of its (last) load
	fence   *uint64
	ints    *[2]uint32
	config  configSpace
	seq     uint64
}

// New returns an empty log.
func New() *Log {
	return &Log{kernels: map[uint32]uint32{}, order: map[uint32]uint64{}}
}

// Record adds e, compacting as it goes. A config write is kept as the
// bytes it leaves in config space (configSpace.record says which writes
// are taken).
func (l *Log) Record(e Entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.raw++
	l.seq++
	switch e.Kind {
	case KernelLoad:
		l.kernels[e.Handle] = e.Arg
		l.order[e.Handle] = l.seq
	case KernelUnload:
		delete(l.kernels, e.Handle)
		delete(l.order, e.Handle)
	case Fence:
		v := e.Value
		l.fence = &v
	case Interrupts:
		l.ints = &[2]uint32{e.Handle, e.Arg}
	case ConfigWrite:
		l.config.record(e.Offset, e.Size, e.Arg)
	}
}

// Compacted returns the log's entries in replay order: kernel objects in the
// order they were (last) created, the fence, the interrupt state, then the
// config writes: every config byte the guest wrote, at the value it last
// wrote, written once by naturally aligned writes in offset order, except
// that MSI control (the enable) follows the MSI address and data and the
// command register comes last, so a front end decodes BARs and signals only
// once they are in place (configSpace.writes).
func (l *Log) Compacted() []Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Entry
	handles := make([]uint32, 0, len(l.kernels))
	for h := range l.kernels {
		handles = append(handles, h)
	}
	sort.Slice(handles, func(i, j int) bool { return l.order[handles[i]] < l.order[handles[j]] })
	for _, h := range handles {
		out = append(out, Entry{Kind: KernelLoad, Handle: h, Arg: l.kernels[h]})
	}
	if l.fence != nil {
		out = append(out, Entry{Kind: Fence, Value: *l.fence})
	}
	if l.ints != nil {
		out = append(out, Entry{Kind: Interrupts, Handle: l.ints[0], Arg: l.ints[1]})
	}
	return append(out, l.config.writes()...)
}

// Stats reports raw against compacted size: raw counts every Record call,
// compacted the entries Compacted returns now.
func (l *Log) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := len(l.kernels) + l.config.count()
	if l.fence != nil {
		n++
	}
	if l.ints != nil {
		n++
	}
	return Stats{RawEntries: l.raw, RawBytes: l.raw * EntrySize, CompactedEntries: n, CompactedBytes: n * EntrySize}
}

// Reset empties the log (device reset: the objects it described are gone).
// Config writes are kept: a device reset does not undo the front end's
// configuration, which the guest re-programs itself if it needs to.
func (l *Log) Reset() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.kernels = map[uint32]uint32{}
	l.order = map[uint32]uint64{}
	l.fence, l.ints = nil, nil
}
