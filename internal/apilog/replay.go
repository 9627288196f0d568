package apilog

import "fmt"

// Target is what a log replays into on a migration's destination.
type Target interface {
	LoadKernel(handle, kind uint32) error
	SetFenceDone(value uint64) error
	SetInterrupts(status, mask uint32) error
	WriteConfig(offset uint16, size uint8, value uint32) error
}

// Replay applies a compacted log es to t in order. Entries are validated
// first; nothing is applied if any is malformed or is an unload (which a
// compacted log never holds).
func Replay(es []Entry, t Target) error {
	for i, e := range es {
		err := e.validate()
		if err == nil && e.Kind == KernelUnload {
			err = fmt.Errorf("an unload in a compacted log")
		}
		if err != nil {
			return fmt.Errorf("%w: entry %d: %v", ErrCorrupt, i, err)
		}
	}
	for i, e := range es {
		var err error
		switch e.Kind {
		case KernelLoad:
			err = t.LoadKernel(e.Handle, e.Arg)
		case Fence:
			err = t.SetFenceDone(e.Value)
		case Interrupts:
			err = t.SetInterrupts(e.Handle, e.Arg)
		case ConfigWrite:
			err = t.WriteConfig(e.Offset, e.Size, e.Arg)
		}
		if err != nil {
			return fmt.Errorf("apilog: replaying entry %d (%s): %w", i, e.Kind, err)
		}
	}
	return nil
}
