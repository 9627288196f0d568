// Package dirty finds the graphics-memory pages of one vGPU that changed
// since they were sent to a migration destination (docs/migration-protocol.md
// §6; the gMig lineage).
//
// GPU page tables have no dirty bits and the guest CPU writes graphics
// memory through an untrapped aperture (docs/device-abi.md §1), so the only
// complete detector is content: a Tracker keeps one xxhash64 per 4096-byte
// page (the "Software Dirty Page" of gMig) recording what the destination
// holds. Three cheaper sources are layered in front of the hash, as in the
// TPDS extension of gMig:
//
//   - Engine: the engine's own writes are known exactly (engine.Events.Wrote);
//     MarkWritten sets them in an atomic bitmap and Scan never hashes them.
//   - Background: StartBackground re-hashes pages while the VM runs,
//     rate-limited, and marks pages whose content no longer matches, moving
//     hash work out of the downtime.
//   - Sample: a few 64-bit words at fixed pseudo-random offsets (the same for
//     every page, chosen once per Tracker) are recorded next to the hash. A
//     differing sample proves a page dirty without hashing it; matching
//     samples prove nothing, so the full hash still decides.
//
// A fourth source decides which pages need checking at all:
//
//   - Write log: UseWriteLog gives the Tracker the pages the guest CPU
//     wrote, from the operating system's page tables (userfaultfd write
//     protection, internal/guestwrites). Armed before any page is
//     recorded, it lets a scan skip every recorded page that no mark
//     covers and the log does not report: its content was read after the
//     log was armed and nothing wrote it since. Reported pages are still
//     hashed (a rewrite of the same bytes is not sent); they stay to be
//     checked until recorded again. A log that fails is dropped and
//     scans hash every page again.
//
// Device-local memory (docs/device-abi.md §1.3) has no aperture: only the
// engine writes it, so Marks, the engine bitmap alone, is its exact dirty
// set and nothing hashes it.
//
// Scan, the final detection with the VM stopped, reports each dirty page once
// under the first source that applies: Engine, Background, Unrecorded (never
// recorded, so nothing to compare), Sample, Hash.
//
// # Correctness argument
//
// Without a write log, Scan declares a page clean only after hashing its
// current bytes and finding the recorded hash; every other source only adds
// dirt. With one, a page is also clean when it was recorded after the arm
// and the log has reported no write to it since its record began (the
// record clears the page's log bit before copying, so a write racing with
// the copy is reported later and the page checked). A stale engine mark
// or background bit can therefore cost an extra page, never a missed one. The
// one obligation on callers is that a recorded hash equals the bytes sent:
// RecordCopy guarantees it by hashing the very copy the caller sends; with
// Record the caller must read the pages for sending after Record returns
// (hash, then send), so a write in between leaves the page dirty.
//
// # Concurrency and racing reads
//
// Graphics memory is written by the engine and by the guest while the
// tracker reads it, by design. The tracker never writes mem and reads it only
// with plain copies (into per-worker page buffers) and plain 64-bit loads, so
// a page being written is hashed as some mix of old and new bytes — safe in
// Go terms (no pointers live there) and at worst a spurious dirty page.
// Per-page state (hashes, samples, bitmaps) is held in atomics, so Record,
// RecordCopy, MarkWritten, ClearPages, Reset, Scan and the background may all
// run at the same time without data races.
//
// The race detector cannot tell a by-design racing read from a bug, so tests
// run with -race must not write mem concurrently with the tracker using
// plain stores. Under the race build tag the tracker reads mem with 64-bit
// atomic loads (load_race_unsafe.go); a test writer that uses 64-bit atomic
// stores on 8-byte-aligned memory is then race-free (see storeByte in the
// tests). Writes that happen before the tracker runs, or are ordered by
// other synchronization, need nothing special.
//
// # Lock order
//
// Tracker.bgMu guards which background run is current and bgRun.mu guards
// that run's statistics; bgMu is taken before bgRun.mu, and neither is held
// while hashing or waiting. Tracker.wlMu guards the write log and is taken
// alone, only to arm the log and to read it at the start of a scan. All
// per-page state is lock-free.
package dirty
