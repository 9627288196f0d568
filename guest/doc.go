// Package guest is the guest-side driver of the gmig vGPU: it speaks the
// device ABI (docs/device-abi.md, package abi) over a transport-neutral Bus,
// so the same code drives the in-process simulator (package internal/sim)
// and a real Linux guest through /sys/bus/pci/devices/*/resourceN mmaps
// (package internal/sysfs, in the in-guest program cmd/gmig-guest).
//
// The pieces:
//   - bus.go: Bus and DMAMemory, what a transport provides.
//   - cmd.go: encoders for every command of ABI §6.
//   - driver.go, gtt.go, alloc.go, ring.go, ops.go: the Driver — device
//     bring-up, a seeded GTT permutation, a graphics-memory allocator, CPU
//     access through the aperture, command submission, fences and errors
//     (errors.go: what a wait or a command's failure reports).
//   - ref.go: plain Go reference computations for commands and kernels.
//   - suite*.go: a correctness suite checking the device against ref.go
//     (suite_cmds.go, suite_kernels.go, suite_faults.go: its cases by kind).
//   - workload*.go: a seeded, reproducible workload with its own reference
//     model and a digest of the graphics memory it uses (workload_plan.go
//     plans each step, workload_exec.go runs it on the device and the
//     model): the mix of every operation, or a profile
//     (workload_profile.go: idle, render loop, stencil, memory churn,
//     inference, guest-CPU writers) that writes a set number of pages per
//     second of guest time and counts what it achieved (Workload.Stats).
//   - prefill.go: seeded resident data (textures, weights) over a fraction
//     of graphics memory, the same from the host or through the aperture.
//   - hostile*.go: a hostile guest program that attacks its own vGPU (GTT,
//     DMA, copies, the ring, interrupts in hostile_irq.go, resets; the
//     attacks in hostile_attacks.go) and checks the device refuses or
//     contains every attempt (docs/security.md §2.7).
//
// A Driver is not safe for concurrent use: one goroutine owns it, as one
// guest thread would own the device. Separate Drivers (separate vGPUs) are
// independent.
package guest
