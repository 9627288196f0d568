// Package vgpu is one mediated virtual GPU: the device that gmigd serves to
// QEMU over vfio-user (docs/device-abi.md). It composes a partition of the
// host pool (graphics memory: its own sealed memfd, the only descriptor the
// client gets, exposed as the aperture BAR at offset 0), the emulated PCI
// config space, the BAR0 register file, the GTT and the command engine, and
// implements vfio.Device for the vfio-user server.
//
// The device's whole non-memory state is one value, State, with Save and
// Restore; reset, tests and migration share it. Graphics memory is the
// partition's bytes and travels separately.
//
// Goroutines: the vfio server's request goroutine calls the Device methods;
// the engine's goroutine executes commands and reports through Events.
// Lock order: mmio.RegisterFile → pci.Config → vfio.IRQTable. The vGPU's
// memory lock (memMu: trapped aperture accesses and RegionInfo against
// Close, which unmaps graphics memory) is never held with any of them; Close
// takes the pool's mutex under it, and the engine never takes it.
package vgpu
