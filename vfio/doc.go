// Package vfio implements the vfio-user protocol (QEMU
// docs/interop/vfio-user.rst) for hosting a PCI device in gmigd: the wire
// types, a Server that serves one Device to QEMU's vfio-user-pci client over
// a UNIX socket, and a Client for tests, benchmarks and the guest simulator.
//
// Layers, one file each (as in libvfio-user):
//
//	wire.go          message header, command numbers, flags
//	wire_payload.go  payload structs, encode/decode
//	transport.go     whole messages with SCM_RIGHTS descriptors
//	server.go        accept loop and the one request loop per client
//	handlers.go      the dispatch table: command number -> handler
//	version.go       VERSION negotiation and capabilities JSON
//	dma.go           DMATable: client memory windows (mmap in dma_mmap.go)
//	irq.go           IRQTable: eventfds, INTx auto-mask, MSI
//	client.go        Client
//
// Behaviour QEMU 11.1's client depends on is recorded in
// shared/notes/qemu-vfio-user.md and cited where the code follows it.
//
// # Concurrency and lock order
//
// A Server serves one client at a time from one goroutine, so Device methods
// are never called concurrently by the server. DMATable and IRQTable are
// shared with device goroutines and lock internally; neither calls out while
// holding its lock except to write an eventfd, and neither takes the
// other's lock, so there is no lock order between them. IRQTable's unmask
// watcher goroutine takes IRQTable.mu only.
//
// # Errors
//
// Requests that fail get an error reply carrying an errno: a syscall.Errno
// found in the error chain is sent as is, a sentinel of this package
// (ErrInvalid, ErrOverlap, ...) as its errno, anything else as EINVAL.
// Client methods return server errors wrapping the syscall.Errno, so
// errors.Is(err, unix.EINVAL) works.
package vfio
