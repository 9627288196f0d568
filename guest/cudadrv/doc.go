// Package cudadrv is the CUDA driver API over the gmig vGPU, in plain Go:
// the semantics behind the guest's libcuda.so.1 (cmd/libcuda exports them to
// C). It drives the vGPU with the guest driver (package guest), so the
// same code runs in a real Linux guest (internal/sysfs) and in process over
// vfio-user (internal/sim), where its tests run. docs/cuda.md says which
// programs run and what is supported.
//
// The pieces:
//   - lib.go: Lib, cuInit, versions, the device (name, UUID, memory);
//     attributes.go: cuDeviceGetAttribute.
//   - context.go: primary and created contexts, per-thread current stacks.
//   - memory.go: Memory (where allocations come from: device-local memory
//     at device addresses where CAPS has bit 6, else the aperture),
//     cuMemAlloc/Free/GetInfo; copy.go: copies and memsets; staging.go:
//     host copies to device-local memory through staging slots; host.go:
//     host memory.
//   - stream.go, event.go: streams and events over the ring's FENCEs;
//     wait.go: fences and the waits for them (the fence slot in memory
//     where CAPS has bit 1, else FENCE_DONE).
//   - module.go: modules, functions, globals; launch.go: function
//     attributes, cuLaunchKernel (LAUNCH_GRID where CAPS has bit 7, else
//     LAUNCH); params.go: the launch parameter arena; batch.go: doorbell
//     batching.
//   - result.go, results.go: CUresult, its names and strings.
//
// Device pointers are translated to graphics addresses by the allocation
// that holds them. Every call takes the Lib's one
// mutex (helpers that need it held are named ...Locked): the vGPU has one
// ring and the guest driver is not safe for concurrent use. Handles are
// small integers from handleBase up, never the special streams 0, 1, 2.
package cudadrv
