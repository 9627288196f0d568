// Package keepmem makes a long-running gmig program keep the memory its
// Go heap frees mapped, so that a migration's stop phase does not pay page
// faults for buffers it allocates.
//
// Measured (docs/dirty-tracking.md, "What the transfer costs"): during a
// long pre-copy (14–19 s for a 4 GiB vGPU) the Go runtime returns freed
// heap pages to the kernel with MADV_DONTNEED; the stop phase's
// allocations (the GTT and its encoding, stream buffers, the restore's
// copy) then fault in and zero fresh pages — 1225 minor faults and 7.6 ms
// of system time in a 16–28 ms stop phase, against 5–11 faults and 1.3 ms
// with GODEBUG=madvdontneed=0, under which the runtime uses MADV_FREE and
// the kernel reclaims those pages only under memory pressure.
//
// The setting is read once when the runtime starts (a //go:debug line
// does not accept it), so Ensure re-executes the program with it added
// to the environment.
package keepmem

import (
	"os"
	"strings"
	"syscall"
)

// Setting is the GODEBUG entry Ensure adds.
const Setting = "madvdontneed=0"

// optOut is the environment variable that keeps Ensure from re-executing
// (GMIG_KEEPMEM=0), for operators who want the runtime's default.
const optOut = "GMIG_KEEPMEM"

// Env returns env with Setting added to its GODEBUG, and whether it
// changed anything: a GODEBUG that already names madvdontneed (either
// value) is the operator's choice and is kept.
func Env(env []string) ([]string, bool) {
	out := make([]string, 0, len(env)+1)
	found := false
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GODEBUG="); ok {
			found = true
			if strings.Contains(v, "madvdontneed=") {
				return env, false
			}
			if v == "" {
				kv = "GODEBUG=" + Setting
			} else {
				kv = "GODEBUG=" + v + "," + Setting
			}
		}
		out = append(out, kv)
	}
	if !found {
		out = append(out, "GODEBUG="+Setting)
	}
	return out, true
}

// Ensure re-executes the running program with Setting in GODEBUG unless it
// is there already, GODEBUG names madvdontneed, or GMIG_KEEPMEM=0. It
// returns only when no re-execution happened (or exec failed, in which
// case the program runs on with the runtime's default: a slower stop
// phase, nothing wrong). Call it first thing in main, before any
// goroutine or file descriptor matters: exec keeps the process ID and
// open descriptors without close-on-exec.
func Ensure() {
	if os.Getenv(optOut) == "0" {
		return
	}
	env, changed := Env(os.Environ())
	if !changed {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	_ = syscall.Exec(exe, os.Args, env)
}
