// Package engine is the vGPU's command processor (docs/device-abi.md §5–8):
// it fetches commands from the guest's ring in graphics memory, decodes
// them (cmd.go), resolves their address operands (resolve.go: graphics
// addresses through the shadow GTT, Resolver; device addresses of
// device-local memory, ABI 1.3, straight to Config.Local) and runs the work on a Backend: the software back end
// (software.go, the default everywhere), or the NVIDIA back end in
// engine/nvidia (CUDA driver API loaded at run time, graphics memory
// mirrored on the GPU, page hashing there). What both share — the kernels
// in plain Go and the extent checks — is the leaf engine/cpuref. This
// package never imports engine/nvidia: the vGPU's composition
// (vgpu) picks the back end.
//
// Guest modules (module.go, docs/device-abi.md §6.8) are kernel objects
// the engine owns and a back end that can run guest code loads; the
// software back end refuses them (ErrNoModules). LAUNCH_GRID
// (launchgrid.go, §6.10) launches one on a grid with a parameter buffer,
// asynchronously: a kernel's failure comes back from a later back-end
// call wrapping ErrLaunchFailed and is reported against the launch.
//
// One goroutine owns execution (engine.go). Doorbells, quiesce/resume and
// stop reach it through channels it selects on; register reads are served
// under a mutex that is never held while a command runs. Results leave
// through Events: fence completions, faults, and the host extents each
// command wrote, so that migration can track engine writes exactly.
//
// Save and Restore (state.go) move the engine's non-memory state — ring
// registers, pending work, kernel objects — as plain data; they require a
// quiesced engine.
//
// Lock order: Engine.mu is a leaf lock; it is never held across a call to
// the Backend, the Resolver, GuestMemory or Events.
package engine
