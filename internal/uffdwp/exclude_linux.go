//go:build linux

package uffdwp

import (
	"errors"
	"fmt"
)

// ErrArmed says Exclude came after Arm: the pages of a mapping left out
// then would already be protected, and its writes half logged.
var ErrArmed = errors.New("uffdwp: the log is already armed")

// Exclude stops logging this process's mappings of the file that lie
// wholly within mem, and returns how many it left out. It is for gmigd's
// own mapping of a vGPU's memory when the log is of gmigd itself (the
// in-process simulator's guest maps the aperture on its own): only the
// engine writes through that mapping, and it marks each page it writes,
// so logging it too would only double every walk of the page tables. The
// mappings left out are unregistered, no read walks them, and a read does
// not take them for new mappings it never armed (ErrLost). A log of
// another process is left as it is (mem's addresses are this process's,
// not that one's): it returns 0. It must come before Arm (ErrArmed). After
// a failure the log is unusable: close it.
func (l *Log) Exclude(mem []byte) (int, error) {
	if l.armed {
		return 0, ErrArmed
	}
	if l.pid != 0 || len(mem) == 0 {
		return 0, nil
	}
	lo := addrOf(mem)
	hi := lo + uint64(len(mem))
	kept := l.ranges[:0:0]
	n := 0
	for _, r := range l.ranges {
		if r.Addr < lo || r.Addr+r.Len > hi {
			kept = append(kept, r)
			continue
		}
		if err := uffdUnregisterIoctl(l.uffd, &uffdioRange{Start: r.Addr, Len: r.Len}); err != nil {
			return n, fmt.Errorf("uffdwp: unregistering %#x+%#x: %w", r.Addr, r.Len, err)
		}
		l.left = append(l.left, r)
		n++
	}
	l.ranges = kept
	l.pieces = splitRanges(l.ranges, l.workers, minPiece)
	return n, nil
}
