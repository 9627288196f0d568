// Package ptinject runs one system call inside another process and hands
// back the descriptor it returned, the way CRIU's compel parasite code
// does, for the one resource that only the target's own threads can make:
// a userfaultfd bound to the target's memory (fs/userfaultfd.c binds the
// mm of the thread that calls userfaultfd(2)).
//
// The sequence (Userfaultfd): PTRACE_SEIZE and PTRACE_INTERRUPT one thread
// of the target (its main thread), save its registers, point it at a
// syscall instruction already in its memory (the one it stopped behind, or
// one found in its vDSO or another executable mapping) with the call's
// number and arguments, single-step over it, take the new descriptor with
// pidfd_getfd(2), run close(2) of it the same way, restore the registers
// and detach. A thread stopped inside a system call has orig_rax set to -1
// while the injected calls run, so the kernel does not restart its call
// over them; the saved registers bring the restart back when it resumes.
// Signals that arrive while the thread is held are handed back to it at
// detach (only one; the rest of a burst of the same signal merges anyway).
//
// The other threads of the target run on throughout; the held thread is
// stopped for a few system calls' time.
//
// The tracer is a short-lived helper process, this same binary run again
// (the package's init recognises it), which sends the descriptor back over
// a socket (SCM_RIGHTS). gmigd starts QEMU, and the kernel shows a child
// traced by its parent's own thread group to the parent's ordinary waits
// too: Go's os/exec, waiting for QEMU to exit, would take the stops the
// tracer waits for. A helper that is not QEMU's parent avoids that (under
// Yama ptrace scope 1 it needs CAP_SYS_PTRACE, being no ancestor of QEMU).
// A helper still running after helperTimeout is killed.
//
// Refusals come back as sentinel errors: ErrNotPermitted (no ptrace
// access: gmigd needs root or CAP_SYS_PTRACE, or the target as its own
// child under Yama scope 1, and an LSM may still refuse), ErrSeccomp (the
// target runs under a seccomp filter, as QEMU's -sandbox does, which might
// kill it for a call it does not allow: nothing is tried) and
// ErrUnsupported (not linux/amd64). A call the target's kernel refuses
// comes back as its errno, wrapped.
//
// All ptrace requests of one injection come from one locked OS thread of
// the helper, as the kernel requires of a tracer. There are no locks and
// no state between calls.
package ptinject

import "errors"

// ErrNotPermitted says this process may not trace the target.
var ErrNotPermitted = errors.New("ptinject: not permitted to trace the process (needs root or CAP_SYS_PTRACE)")

// ErrSeccomp says the target runs under a seccomp filter, so no call is
// injected into it.
var ErrSeccomp = errors.New("ptinject: the process runs under a seccomp filter")

// ErrUnsupported says injection is not implemented on this platform.
var ErrUnsupported = errors.New("ptinject: only linux/amd64 is supported")
