// Package apilog is gmig's API log: the record of guest-visible state that
// memory hashes cannot capture, kept as it happens and replayed on a
// migration's destination.
//
// What it holds (docs/migration-stream.md, "API log"):
//   - engine objects the guest created by command and names by handle:
//     kernel objects (KERNEL_LOAD / KERNEL_UNLOAD);
//   - the last completed fence value;
//   - the interrupt state (INT_STATUS, INT_MASK);
//   - the guest's PCI config writes, which QEMU's vfio-user front end does
//     not migrate and which must be replayed into the destination QEMU.
//
// Compaction happens as entries arrive, so the log of a long-running VM
// stays as small as the state it describes: an object created then
// destroyed leaves nothing, and config writes are kept as the bytes they
// leave (per byte of config space, the last value written), whatever their
// sizes and overlaps, and come out as the fewest naturally aligned writes
// that put back every byte the guest wrote, in a replay order safe for a
// PCI front end (Log.Compacted). The log still counts what was recorded
// raw, so reports can show raw against compacted size.
//
// A Log is safe for concurrent use (the engine goroutine records kernels
// and fences, the vfio-user server goroutine config writes).
package apilog
