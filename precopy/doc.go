// Package precopy is gmig's migration engine: it moves one running vGPU —
// graphics memory, device state and the API log — from a source gmigd to a
// destination gmigd over one connection, its stop phase over one or more
// (docs/migration-protocol.md; the gMig lineage).
//
// # Strategies
//
// Three strategies run side by side so they can be compared on the same
// workload: OneShot (default; gMig's one-shot pre-copy: every page once
// while the VM runs, then at the stop only the pages the engine wrote or
// whose hash changed), Iterative (classic rounds of re-sending dirty pages
// until the dirty set converges or a round limit), StopCopy (everything at
// the stop). Dirty pages are found by a dirty.Tracker: exact marks for the
// engine's own writes (vgpu.ObserveWrites), an optional background re-hash
// between the pre-copy and the stop, the sampling pre-filter and per-page
// xxhash for everything else — the guest CPU writes the aperture without
// trapping, so content is the only complete detector. Device-local memory
// (docs/device-abi.md §1.3), which only the engine writes, is tracked by
// its exact marks alone (dirty.Marks): sent once live, then exactly the
// pages marked since, never hashed to find them (local.go).
//
// # Correctness of the page hashes
//
// A page recorded clean must be exactly what the destination holds. In the
// live phase the tracker copies each batch (dirty.Tracker.RecordCopy),
// records the hash of that copy and the stream sends the same copy with the
// same hash (stream.Writer.WriteCopies): a page written after its copy
// differs from its record, even if it later changes back (A→B→A). In the
// stop phase memory is frozen (VM paused, engine quiesced) and pages are
// sent straight from it.
//
// # The conversation
//
// One connection, both directions (docs/migration-stream.md §8 and §10):
//
//	source → destination: header, Meta{begin}, PageBatch*,        (pre-copy)
//	                      Meta{stop}, PageBatch*, DeviceState,    (stop phase)
//	                      APILog, FrontEnd, Meta{summary}, End
//	destination → source: a stream of its own: header, Meta{verdict}, End
//
// With extra connections (Source.AddStreams, Options.NextStream) the stop
// phase's pages are spread over them and the main one, each page on one
// stream; each extra one carries header, ShardHeader, PageBatch*, End, and
// the destination restores the device only once every stream has ended
// (shards.go, receive_shards.go; docs/migration-stream.md §3.3).
//
// Meta payloads are JSON. DeviceState is the gob of vgpu.State with kernel
// objects, FENCE_DONE and INT_STATUS/INT_MASK removed: the APILog section
// (the compacted log's kernel, fence and interrupt entries, apilog.Encode)
// is their only carrier, and the destination replays it into the state
// before restoring it. The source checks, before sending, that the log
// describes the device exactly, and fails the migration if not (which
// part goes where is the vGPU's decision: vgpu.SaveMigrated, ApplyLog,
// RestoreMigrated). FrontEnd holds the log's config writes
// (apilog.Encode); Receive records them in the destination vGPU's API log
// (v.ConfigWrites), which thereby holds everything needed to migrate it
// again, and the orchestrator replays them into the destination QEMU.
//
// The verdict is sent once: after End on success (with the destination's
// restore and replay times), or as soon as the destination fails. The
// source reads it on its own goroutine from NewSource on, so a refusal
// stops a pre-copy early; a destination that failed reads the connection
// until the source closes or half-closes it, so the refusal arrives rather
// than being lost to a TCP reset.
//
// Without a way back (Options.NoVerdict: vfio-user's migration data runs
// one way) no verdict is sent and the VMM carries the outcome.
//
// # Migration driven by the VMM
//
// Package precopy/native makes a vGPU that migrates through vfio-user
// itself (DEVICE_FEATURE migration state, MIG_DATA_READ/WRITE): the same
// stream, made by a Source on the VFIO migration v2 state machine's arcs
// and read by Receive into the destination device, which the VMM created
// beforehand.
//
// # Roll-back
//
// Migration never writes the source's graphics memory. Any failure —
// connection dropped, a corrupt stream refused, a ctx cancelled, a
// destination that cannot restore — leaves the source to Rollback, which
// stops tracking, resumes the vGPU if Stop quiesced it and half-closes the
// connection; Receive leaves the destination vGPU quiesced and returns the
// error, and its owner discards it. The verdict is the destination's
// promise, not the commit: the orchestrator (after QEMU's switchover)
// decides, and Rollback after a successful Stop is allowed for when it
// fails later; the destination's owner then discards the received vGPU.
//
// # Concurrency
//
// A Source belongs to the goroutine that calls Precopy and Stop; Rollback
// and Close must not overlap them. Blocked connection calls are interrupted
// through deadlines when the connection has them (net.Conn); otherwise ctx
// is checked between batches and sections. Source.mu guards the lifecycle
// fields and is never held while waiting on the connection.
package precopy
