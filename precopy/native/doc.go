// Package native is the vfio-user migration interface of a vGPU: a
// vfio.Migrator (VFIO migration v2 over DEVICE_FEATURE, MIG_DATA_READ and
// MIG_DATA_WRITE) built on package precopy, for a VMM whose vfio-user
// client drives the device's migration itself. The migration data is the
// stream of docs/migration-stream.md in its verdict-less mode (§10): the
// VMM carries the outcome.
//
// QEMU 11.1's vfio-user client does not migrate its devices, so gmigd's
// orchestrator moves vGPUs beside QEMU's migration instead; this interface
// is served on every vGPU's socket so that a client that gains migration
// support drives the same stream natively.
package native
