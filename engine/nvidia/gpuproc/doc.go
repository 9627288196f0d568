// Package gpuproc runs a CUDA vGPU's back end in a GPU worker: a process
// of its own that gmigd starts and supervises, so that the vGPU's CUDA
// context — its device memory, its guest's kernels, a sticky fault — is
// the GPU's MMU's to keep apart from every other vGPU's
// (docs/nvidia.md, "Isolation").
//
// The worker is this very executable run again with WorkerEnv set: the
// package's init serves the back end (worker.go, server.go) and exits
// before main runs. gmigd's side is Client (client.go: the worker's
// life and the connections; backend.go, tracker.go: the methods), an
// nvidia.VGPUBackend over the protocol (wire.go): framed requests on a
// unix stream socket for the engine's calls, in order, with launches
// posted and write-backs reported before the call's reply, and a second
// socket for what runs beside the engine (statistics, the migration's
// reader of device-local memory). The partition's memfd, the aperture, is
// shared: mapped by the worker, never copied. Bulk payloads (device-local
// memory's reads and writes, LoadLocal, the tracker's snapshots and
// reads) cross in a bulk buffer, a memfd of the worker's own that both
// map, a region per connection (bulk.go); the frames carry where.
//
// Lock order (client): conn.mu (the engine connection's before the side
// connection's, where both are held: unmapBulk), then posts.mu. The
// server has no locks:
// each connection is one goroutine's, and the side connection waits for
// the engine connection's open before its first call.
package gpuproc
