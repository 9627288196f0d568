// Package mmio is the vGPU's register file: every guest access to BAR0 that
// vfio-user traps arrives here, is decoded by offset and width, and is
// dispatched through a table of registers (docs/device-abi.md §3).
//
// The register file owns the interrupt and error registers, the heartbeat and
// scratch registers. Ring registers and the doorbell are the engine's, GTT
// window accesses go to the GTT; both are reached through small interfaces so
// this package holds no engine or GTT state of its own.
//
// Lock order: RegisterFile.mu is taken before anything Notify reaches (the
// PCI config and the vfio IRQ table). It is never held while calling the
// engine, the GTT or the Reset and Heartbeat hooks, because the engine calls
// back into the register file (Raise, Fault) from its own goroutine.
package mmio
