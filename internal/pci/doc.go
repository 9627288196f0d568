// Package pci emulates the vGPU's PCI type-0 configuration space: the 256
// bytes QEMU's vfio-user client reads and writes through region 7 (the
// config region) and presents to the guest as the device's front end.
//
// A Config is built from an Identity (vendor, device, class, ...), six BAR
// descriptions and an MSI switch (docs/device-abi.md §2). Every byte has a
// writable mask: the guest may program BAR addresses (with the usual
// all-ones size probing: address bits below the BAR size are read-only, so
// writing all ones reads back the size mask and the type flags), the command
// register's I/O, memory, bus-master and INTx-disable bits, the interrupt
// line, and the MSI capability's address, data and enable bit. Everything
// else is read-only and writes to it are ignored, byte by byte, so a write
// that spans several registers changes exactly their writable bits. There is
// no expansion ROM: its BAR (0x30) reads 0, as do absent BARs.
//
// QEMU does not restore a vfio-user device's front end after live migration
// (docs/migration-protocol.md §2.2), so the Config records which registers the guest
// wrote. Writes lists them, one entry per register with its current value,
// in the order that is safe to replay into the destination QEMU: BARs, the
// interrupt line, MSI address and data, MSI enable, and the command register
// last, so nothing is decoded before it is placed.
//
// Save and Restore carry the space and the written-register record as plain
// data; Restore refuses a state whose read-only bytes (identity, BAR types,
// capability layout) differ from this Config's.
//
// Concurrency: one sync.RWMutex guards the space. Read, Write, Reset and
// Restore may come from the vfio server goroutine while an interrupt path
// polls MSIEnabled, MSIMessage or INTxDisabled; no method calls out while
// holding the lock, so there is no lock order to keep.
package pci
