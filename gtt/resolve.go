package gtt

import (
	"fmt"
	"slices"

	"github.com/gmig-dev/gmig/abi"
)

// FaultError is a failed translation: the first graphics address of the
// range that could not be reached, and why. It wraps ErrFault.
type FaultError struct {
	GA     uint64 // first faulting graphics address
	Write  bool   // the access wanted to write
	Reason string // "not mapped", "read-only", "beyond the address space"
}

func (e *FaultError) Error() string {
	access := "read"
	if e.Write {
		access = "write"
	}
	return fmt.Sprintf("gtt: page fault: %s at graphics address %#x: %s", access, e.GA, e.Reason)
}

// Unwrap makes errors.Is(err, ErrFault) hold.
func (e *FaultError) Unwrap() error { return ErrFault }

// Resolve translates the graphics-address range [ga, ga+n) into host pool
// extents, in graphics-address order, merging pages whose host backing is
// adjacent. Every page must be mapped, and writable when write is set; the
// range must lie inside the graphics address space (Entries()*4096 bytes).
// Otherwise the error is a *FaultError (wrapping ErrFault) naming the first
// graphics address that faults. n == 0 resolves to nil.
//
// Resolve allocates exactly one slice, sized to the result.
func (t *Table) Resolve(ga, n uint64, write bool) ([]Extent, error) {
	return t.AppendResolve(nil, ga, n, write)
}

// AppendResolve is Resolve appending to dst, for callers that reuse a
// buffer; on error it returns dst unchanged. It grows dst at most once.
func (t *Table) AppendResolve(dst []Extent, ga, n uint64, write bool) ([]Extent, error) {
	if n == 0 {
		return dst, nil
	}
	t.mu.RLock()
	defer t.mu.RUnlock()
	count, err := t.countLocked(ga, n, write)
	if err != nil {
		return dst, err
	}
	dst = slices.Grow(dst, count)
	return t.fillLocked(dst, ga, n), nil
}

// countLocked checks every page of [ga, ga+n) (n > 0) and returns how many
// extents the range resolves to.
func (t *Table) countLocked(ga, n uint64, write bool) (int, error) {
	space := uint64(t.entries) * abi.PageSize
	if ga >= space {
		return 0, &FaultError{GA: ga, Write: write, Reason: "beyond the address space"}
	}
	end := ga + n
	beyond := end < ga || end > space // the range leaves the address space
	if beyond {
		end = space
	}
	want := uint64(abi.GTTValid)
	if write {
		want |= abi.GTTWritable
	}
	count := 0
	var next uint64 // host offset that would continue the last extent
	for p := ga >> abi.PageShift; p<<abi.PageShift < end; p++ {
		s := t.shadow[p]
		if s&want != want {
			at := max(ga, p<<abi.PageShift)
			if s&abi.GTTValid == 0 {
				return 0, &FaultError{GA: at, Write: write, Reason: "not mapped"}
			}
			return 0, &FaultError{GA: at, Write: write, Reason: "read-only"}
		}
		off := s & shadowOffMask
		if p == ga>>abi.PageShift {
			off += ga & (abi.PageSize - 1)
		}
		if count == 0 || off != next {
			count++
		}
		next = (s & shadowOffMask) + abi.PageSize
	}
	if beyond {
		return 0, &FaultError{GA: space, Write: write, Reason: "beyond the address space"}
	}
	return count, nil
}

// fillLocked appends the extents of [ga, ga+n), which countLocked accepted.
func (t *Table) fillLocked(dst []Extent, ga, n uint64) []Extent {
	first := len(dst)
	for n > 0 {
		in := ga & (abi.PageSize - 1)
		chunk := min(n, abi.PageSize-in)
		off := t.shadow[ga>>abi.PageShift]&shadowOffMask + in
		if last := len(dst) - 1; last >= first && dst[last].Off+dst[last].Len == off {
			dst[last].Len += chunk
		} else {
			dst = append(dst, Extent{Off: off, Len: chunk})
		}
		ga += chunk
		n -= chunk
	}
	return dst
}
