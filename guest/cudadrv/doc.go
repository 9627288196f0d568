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
//   - memory.go: Memory (where allocations come from: the aperture today),
//     cuMemAlloc/Free/GetInfo; copy.go: copies and memsets.
//   - stream.go, event.go: streams and events over the ring's FENCEs.
//   - module.go: modules, functions, globals, cuLaunchKernel.
//   - result.go, results.go: CUresult, its names and strings.
//
// Device pointers are graphics addresses. Every call takes the Lib's one
// mutex (helpers that need it held are named ...Locked): the vGPU has one
// ring and the guest driver is not safe for concurrent use. Handles are
// small integers from handleBase up, never the special streams 0, 1, 2.
package cudadrv
