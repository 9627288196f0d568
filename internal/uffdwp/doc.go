// Package uffdwp logs which pages of a shared file mapping a process
// writes: userfaultfd write protection in its asynchronous mode, read back
// with the PAGEMAP_SCAN ioctl (Linux 6.7+). gmigd uses it to see the
// guest CPU's stores to a vGPU's aperture, which no other mechanism
// reports (docs/dirty-tracking.md).
//
// A userfaultfd binds the memory of the process whose thread creates it,
// so for another process (QEMU) Open has one be created in it by ptrace
// injection (package ptinject) and takes it over; for this process
// (pid 0) it calls userfaultfd(2) itself. Open registers every writable
// shared mapping of the file it finds in /proc/PID/maps; in this process,
// Exclude (before Arm) leaves out mappings whose writer marks its own
// writes (gmigd's mapping of a vGPU's memory), so no walk covers them. Arm
// write-protects every page (never-populated ones get markers); a write
// to a protected page is resolved by the kernel on the spot (WP_ASYNC: no
// handler thread, the writer never waits) and leaves the page unprotected,
// which PAGEMAP_SCAN reports as PAGE_IS_WRITTEN. Written returns those
// pages and protects them again in the same pass, for rounds; Peek
// returns them and changes nothing, for the last look at memory nothing
// writes any more. Every walk is cut into pieces of whole page tables
// spread over GOMAXPROCS goroutines (the kernel takes the mmap lock
// shared): a walk's cost grows with the size of the mappings, a few
// tenths of a millisecond per GiB per goroutine.
//
// Order matters as with hashing: Arm (or Written) first, then read the
// pages to send; a write after that read is then in the next Written.
//
// Failures that make the log untrustworthy wrap ErrLost (a registered
// mapping gone or replaced — PM_SCAN_CHECK_WPASYNC's EPERM — or a new
// mapping of the file that was never armed); ErrUnsupported says the
// kernel lacks the features; SelfTest checks once, in this process, that
// a scratch mapping's writes come back exactly. A Log is used by one
// goroutine at a time; there are no locks.
package uffdwp
