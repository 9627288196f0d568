// Package orchestrator owns the sequence of a live migration of a VM and
// its vGPU between two gmigd, on both sides, written once against two small
// interfaces: the VM (SourceVM, DestVM: QEMU over QMP in hostd/qemu, the
// in-process simulator in hostd) and the Transport between the two gmigd
// (TCP, or mutual TLS from package internal/mtls). gmigd migrate, gmigd
// demo and gmig-bench all run this sequence (docs/migration-protocol.md).
//
// # The sequence
//
//	source                                   destination
//	control connection: hello, Prepare   →   Host.Land: the vGPU Prepare's
//	  (the vGPU's vgpu.Spec)                 spec describes, exactly (else
//	                                         ready{error}), quiesced, served,
//	                                         and the VM (paused, waiting for
//	                                    ←    the VMM's migration)
//	                                         ready{incoming}
//	data connection: hello, vGPU stream  →   precopy.Receive into the vGPU
//	  live phase (the VM runs)
//	stream connections 1 … N−1: hello    →   held for the stop phase
//	  (N: at most ready.streams; streams.go)
//	SourceVM.Migrate(incoming): the VMM's own pre-copy (the VM runs)
//	SourceVM.WaitPaused: the VMM paused the VM        ← downtime starts
//	  stop phase: quiesce, guest RAM, state, API log, front end, then
//	  final scan, dirty pages (on all N streams); SourceVM.Switchover
//	  starts at the quiesce and runs beside the rest (switchover.go)
//	                                         an EarlyAttacher VM is attached
//	                                         once the front end arrived:
//	                                         DestVM.WaitLoaded, device-written
//	                                         guest RAM, RestoreFrontEnd (attach.go)
//	                                    ←    verdict (the vGPU is restored,
//	                                         still quiesced, not live)
//	the switchover completed, the verdict in
//	decision{commit}                     →   the attach ends (or runs now, for a
//	                                         VM attached after the commit), the
//	                                         record, the engine runs, DestVM.Resume
//	                                    ←    committed{timestamps}  ← downtime ends
//	SourceVM.Release; the caller destroys the source vGPU
//	                                    ←    beat (first heartbeat after resume)
//
// The VMM's migration starts only after the vGPU's live phase: QEMU 11.1
// cannot be told to hold its switchover (measured: with downtime-limit 0 it
// still stops the VM once its dirty RAM drains), so starting it later is the
// only way to guarantee the VM is never paused during the vGPU's live phase.
//
// # One live copy at every instant
//
// The destination's VM runs only after the source's commit, which the
// source sends only once it has both the destination's verdict and its
// own VMM's completed switchover. What the destination does before the
// commit (an early attach) never runs the VM and dies with the landing's
// discard. A stop phase that fails with the switchover in flight waits
// for it to return before the rollback resumes the VM. Every
// failure before the commit rolls back: the source's vGPU resumes
// (precopy.Source.Rollback), its VMM's migration is cancelled and the VM
// resumed (SourceVM.Resume), and the destination discards what it built
// (Landing.Discard) when told, when its connection ends or when its wait
// for the decision times out. (A VMM that cannot resume the VM — it
// exited, as a guest that powers itself off ends its QEMU — is reported
// as such, ErrNotResumed, never as a VM that runs on.) After the commit,
// the source resumes only on the destination's word that it did not and
// will not run the VM (committed{ok:false}, or the outcome "aborted" or
// "unknown" when asked):
// an unanswered commit is resolved by asking the destination (Resolve)
// until it answers, and while it cannot be asked the VM stays paused at
// the source (ErrOutcomeUnknown) — never two live copies. A destination
// gmigd that dies takes its QEMUs with it (they are its children, killed
// with it), so a restarted one that does not know the migration is a
// destination where the VM does not run.
//
// # Downtime
//
// Report.Downtime is what the guest lives: from the moment the source VMM
// stopped the VM to the moment the destination VMM ran it again, on the
// host clocks (QEMU's STOP and RESUME event timestamps; the simulator's own
// pause and resume). Report.Terms divide it into consecutive intervals
// taken from both sides' timestamps and the stop phase's measurements;
// they never overlap and add up to it exactly. Work that runs beside
// another term (the VMM's switchover beside the stop phase, an early
// attach before the commit) counts in its term only for what lies after
// that other work; Report.Beside gives it in full. Two intervals span both
// hosts' clocks (the commit's way, and through it the total): across real
// hosts they carry the clocks' skew, which Report.ClockSkewSuspect flags
// when a term comes out negative. Report.GuestGap is the guest-observed
// figure: the gap between its last heartbeat seen at the source and its
// first at the destination.
//
// # Concurrency
//
// Migrate runs on its caller's goroutine; the Progress callback is called
// from another (calls never overlap). A Destination serves each connection
// on its own goroutine; the decision of one migration is read by one
// goroutine, so a late commit after a timeout is never acted on.
package orchestrator
