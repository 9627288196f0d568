// Package memprobe touches memory that may not be there — a file mapping
// past the end of its file, reserved address space, a range unmapped by
// someone else — and reports the fault instead of dying of it. Tests use it
// to show what a vGPU's client, or gmigd itself, can and cannot reach.
//
// A probe turns a SIGSEGV or SIGBUS on the probing goroutine into a return
// value (runtime/debug.SetPanicOnFault); any other panic goes on. There are
// no locks.
package memprobe

import (
	"runtime/debug"
)

// Load reads b[i]. ok is false when the read faulted.
func Load(b []byte, i int) (v byte, ok bool) {
	defer catch(&ok, debug.SetPanicOnFault(true))
	return b[i], true
}

// Store writes v to b[i] and reports whether it landed (false: it faulted).
func Store(b []byte, i int, v byte) (ok bool) {
	defer catch(&ok, debug.SetPanicOnFault(true))
	b[i] = v
	return true
}

// LoadAll reads b page by page (pageSize bytes apart, and b's last byte)
// and returns how many of those reads faulted and the bytes of the ones
// that did not, in order.
func LoadAll(b []byte, pageSize int) (faults int, seen []byte) {
	for _, i := range probePoints(len(b), pageSize) {
		if v, ok := Load(b, i); ok {
			seen = append(seen, v)
		} else {
			faults++
		}
	}
	return faults, seen
}

// StoreAll writes v to b page by page (as LoadAll reads) and returns how
// many of the writes faulted and how many landed.
func StoreAll(b []byte, pageSize int, v byte) (faults, landed int) {
	for _, i := range probePoints(len(b), pageSize) {
		if Store(b, i, v) {
			landed++
		} else {
			faults++
		}
	}
	return faults, landed
}

func probePoints(n, pageSize int) []int {
	var pts []int
	for i := 0; i < n; i += pageSize {
		pts = append(pts, i)
	}
	if n > 0 && (n-1)%pageSize != 0 {
		pts = append(pts, n-1)
	}
	return pts
}

// catch, deferred by a probe that set SetPanicOnFault, restores the
// goroutine's earlier setting (was) and turns a memory fault into
// *ok = false; any other panic goes on.
func catch(ok *bool, was bool) {
	r := recover()
	debug.SetPanicOnFault(was)
	if r == nil {
		return
	}
	if _, fault := r.(interface{ Addr() uintptr }); !fault {
		panic(r)
	}
	*ok = false
}
