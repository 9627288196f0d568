// Package vfio implements the vfio-user protocol (QEMU
// docs/interop/vfio-user.rst) for hosting a PCI device in gmigd: the wire
// types, a Server that serves one Device to QEMU's vfio-user-pci client over
// a UNIX socket, and a Client for tests, benchmarks and the guest simulator.
//
// Layers, one file each (as in libvfio-user):
//
//	wire.go          message header, command numbers, flags
//	wire_payload.go  payload structs, encode/decode
//	transport.go     whole messages with SCM_RIGHTS descriptors, message timeout
//	accept.go        accept loop: one client at a time, waiting and refusal
//	server.go        ServeConn and the request loop of the served client
//	handlers.go      the dispatch table: command number -> handler
//	version.go       VERSION negotiation and capabilities JSON
//	dma.go           DMATable: client memory windows (mmap in dma_mmap.go)
//	irq.go           IRQTable: eventfds, INTx auto-mask, MSI
//	migration.go     the migration v2 FSM: MigState, arcs, NextHop
//	migration_server.go  DEVICE_FEATURE, MIG_DATA_READ/WRITE for a Migrator
//	dmalog.go        DMALog and the DMA logging features for a DMALogger
//	                 (wire_dmalog.go: their structs)
//	client.go        Client (migration_client.go, dmalog_client.go: its
//	                 migration and DMA logging methods)
//
// Commands served: VERSION, DMA_MAP, DMA_UNMAP, DEVICE_GET_INFO,
// DEVICE_GET_REGION_INFO, DEVICE_GET_IRQ_INFO, DEVICE_SET_IRQS, REGION_READ,
// REGION_WRITE (posted too), DEVICE_RESET, REGION_WRITE_MULTI, and, when the
// Device is also a Migrator, DEVICE_FEATURE (MIGRATION, MIG_DEVICE_STATE,
// MIG_DATA_SIZE) with MIG_DATA_READ and MIG_DATA_WRITE; when it is a
// DMALogger, DEVICE_FEATURE's DMA_LOGGING_START, _STOP and _REPORT, answered
// from the pages the device marked in its DMALog (4 KiB granularity, the
// report clearing what it returns; logging stops when its client leaves).
// Anything else, DEVICE_GET_REGION_IO_FDS included, and the migration
// commands for a device that does not migrate, get ENOTSUP.
//
// # Migration
//
// The server keeps a Migrator's FSM state (RUNNING at start, kept across
// connections), walks each requested state one arc at a time as NextHop
// gives them, calling Migrator.SetMigState per arc, and allows MIG_DATA_READ
// only in PRE_COPY and STOP_COPY and MIG_DATA_WRITE only in RESUMING
// (EINVAL otherwise). A failing arc leaves the state where the last good arc
// ended; an error wrapping ErrMigStateLost puts the FSM in ERROR, which only
// DEVICE_RESET leaves (back to RUNNING). The P2P states are not offered:
// vfio-user does not use them, so the server drops MigrationP2P from the
// device's flags and the device sees the arcs of a device without P2P.
//
// # Limits
//
// One client is served at a time: the device has one DMA table and one set
// of interrupt eventfds, and they are the client's. A client that leaves
// (or is dropped) takes its DMA mappings and eventfds with it; the device
// keeps its state for the next client.
//
// A message must not stall: from its first byte, the whole message
// (header, payload, descriptors) must arrive within the message timeout
// (ServerConfig.MessageTimeout, DefaultMessageTimeout = 5 s, the order of
// QEMU's own x-msg-timeout), and the client must take each whole reply
// within it. Otherwise the connection is closed, as on a disconnect, with
// one log line (ErrMessageTimeout), and the next client is served. Silence
// between messages is never timed: QEMU may send nothing for as long as the
// guest leaves the device alone.
//
// A second client is answered, never left in the listen backlog: Serve
// keeps accepting, lets it wait up to ServerConfig.BusyWait
// (DefaultBusyWait = 2 s) for the served client to leave, serves it if that
// happens, and otherwise answers its first message (normally VERSION, which
// must arrive within the message timeout) with an error reply carrying
// EBUSY and closes it, logging one line. Dial then fails with an error
// wrapping unix.EBUSY. Beyond maxWaitingClients (4) connections waiting
// at once, more are closed unanswered. The served client is never affected.
//
// Behaviour QEMU 11.1's client depends on is recorded in docs/testing.md
// ("QEMU 11.1 and vfio-user") and cited where the code follows it.
//
// # Concurrency and lock order
//
// A Server serves one client at a time from one goroutine (the slot, a
// one-token channel, admits one session), so Device methods are never
// called concurrently by the server. The accept loop and connections that
// wait or are refused run on goroutines of their own and touch neither the
// device nor the DMA and IRQ tables. DMATable and IRQTable are
// shared with device goroutines and lock internally; neither calls out while
// holding its lock except to write an eventfd, and neither takes the
// other's lock, so there is no lock order between them. IRQTable's unmask
// watcher goroutine takes IRQTable.mu only. The migration state has its own
// mutex (for Server.MigState), never held while calling the device.
//
// # Errors
//
// Requests that fail get an error reply carrying an errno: a syscall.Errno
// found in the error chain is sent as is, a sentinel of this package
// (ErrInvalid, ErrOverlap, ErrMigStateLost, ...) as its errno, anything
// else as EINVAL.
// Client methods return server errors wrapping the syscall.Errno, so
// errors.Is(err, unix.EINVAL) works.
package vfio
