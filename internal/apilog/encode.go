package apilog

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/gmig-dev/gmig/internal/pci"
)

// Errors callers branch on.
var (
	ErrCorrupt = errors.New("apilog: corrupt log")
	ErrTooBig  = errors.New("apilog: log too large")
)

// MaxEntries bounds a decoded log: far more than any compacted log holds
// (at most 64 kernels, one fence, one interrupt state, 256 config bytes).
const MaxEntries = 1 << 16

// Encode lays entries out as u32 count, then EntrySize bytes each:
// u8 kind, u8 size, u16 offset, u32 handle, u32 arg, u64 value, all
// little-endian (docs/migration-stream.md, "API log").
func Encode(es []Entry) []byte {
	b := make([]byte, 4, 4+len(es)*EntrySize)
	binary.LittleEndian.PutUint32(b, uint32(len(es)))
	for _, e := range es {
		b = append(b, byte(e.Kind), e.Size)
		b = binary.LittleEndian.AppendUint16(b, e.Offset)
		b = binary.LittleEndian.AppendUint32(b, e.Handle)
		b = binary.LittleEndian.AppendUint32(b, e.Arg)
		b = binary.LittleEndian.AppendUint64(b, e.Value)
	}
	return b
}

// Decode reverses Encode, validating every entry.
func Decode(b []byte) ([]Entry, error) {
	if len(b) < 4 {
		return nil, fmt.Errorf("%w: %d bytes, no count", ErrCorrupt, len(b))
	}
	n := binary.LittleEndian.Uint32(b)
	if n > MaxEntries {
		return nil, fmt.Errorf("%w: %d entries (at most %d)", ErrTooBig, n, MaxEntries)
	}
	if uint64(len(b)-4) != uint64(n)*EntrySize {
		return nil, fmt.Errorf("%w: %d entries need %d bytes, have %d", ErrCorrupt, n, uint64(n)*EntrySize, len(b)-4)
	}
	es := make([]Entry, n)
	for i := range es {
		p := b[4+i*EntrySize:]
		e := Entry{
			Kind: Kind(p[0]), Size: p[1], Offset: binary.LittleEndian.Uint16(p[2:]),
			Handle: binary.LittleEndian.Uint32(p[4:]), Arg: binary.LittleEndian.Uint32(p[8:]),
			Value: binary.LittleEndian.Uint64(p[12:]),
		}
		if err := e.validate(); err != nil {
			return nil, fmt.Errorf("%w: entry %d: %v", ErrCorrupt, i, err)
		}
		es[i] = e
	}
	return es, nil
}

// validate checks that e is a well-formed entry of its kind.
func (e Entry) validate() error {
	switch e.Kind {
	case KernelLoad:
		if e.Handle == 0 || e.Size != 0 || e.Offset != 0 || e.Value != 0 {
			return fmt.Errorf("bad kernel-load %+v", e)
		}
	case KernelUnload:
		if e.Handle == 0 || e.Size != 0 || e.Offset != 0 || e.Arg != 0 || e.Value != 0 {
			return fmt.Errorf("bad kernel-unload %+v", e)
		}
	case Fence:
		if e.Size != 0 || e.Offset != 0 || e.Handle != 0 || e.Arg != 0 {
			return fmt.Errorf("bad fence %+v", e)
		}
	case Interrupts:
		if e.Size != 0 || e.Offset != 0 || e.Value != 0 {
			return fmt.Errorf("bad interrupts %+v", e)
		}
	case ConfigWrite:
		if (e.Size != 1 && e.Size != 2 && e.Size != 4) || int(e.Offset)+int(e.Size) > pci.Size ||
			e.Offset%uint16(e.Size) != 0 || e.Handle != 0 || e.Value != 0 ||
			(e.Size < 4 && e.Arg>>(8*e.Size) != 0) {
			return fmt.Errorf("bad config write %+v", e)
		}
	default:
		return fmt.Errorf("unknown kind %d", e.Kind)
	}
	return nil
}
