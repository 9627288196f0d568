// Package sim is the built-in guest simulator: a guest.Bus over the
// vfio-user client that plays QEMU and the guest together. Attach dials a
// vGPU's socket, backs guest RAM with a memfd that it DMA-maps at IOVA 0,
// mmaps the aperture from the descriptor the server passes, programs PCI
// config space as firmware and a guest driver would (BARs, command
// register, MSI), and wires INTx or MSI to eventfds.
//
// Interrupts follow QEMU's INTx handling: the trigger eventfd fires when the
// line asserts (the server then masks it); the guest's EOI is a write to the
// unmask (resample) eventfd. WaitIRQ models the guest's handler returning:
// it sends the EOI for the previous interrupt before sleeping for the next.
package sim
