// Package cuda is the part of the NVIDIA CUDA driver API (cuda.h, the
// "driver API", not the runtime) that gmig uses, loaded at run time from
// libcuda.so.1 with github.com/ebitengine/purego: no build needs the CUDA
// toolkit, a C compiler or cgo, and a machine without the library or
// without a GPU is a normal state (Open returns ErrNoDriver or
// ErrNoDevice) rather than a link failure.
//
// What is covered: initialisation and device queries, the device's primary
// context, streams, linear and pinned allocations, host registration,
// copies and memsets, the virtual-memory-management calls
// (cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess and their
// inverses) that let a vGPU's graphics memory be placed at a chosen device
// virtual address, modules (PTX loaded with the JIT's error log) and kernel
// launches.
//
// # Contexts and threads
//
// Every Device holds its primary context (cuDevicePrimaryCtxRetain), which
// all users in the process share. A CUDA context is current per OS thread,
// while goroutines move between threads; so every call locks its goroutine
// to its thread, makes the context current and makes the call, in that
// order (Device.do). Calls are therefore safe from any goroutine; work on
// one Stream is ordered, work on different streams is not.
//
// # Memory
//
// Device addresses are DevPtr values (plain integers, never Go pointers).
// Host memory handed to the driver is either pinned by the driver
// (AllocHost, whose slices must not be used after FreeHost) or Go memory
// that the caller keeps alive for as long as the driver may touch it
// (HostRegister: until HostUnregister; copies: until the stream is
// synchronised). Kernel parameters are copied by cuLaunchKernel itself, so
// Launch pins them only for the call.
//
// Constants cite cuda.h of CUDA 13.0 (driver API 13000); numeric values
// are ABI and have not changed since CUDA 11.
package cuda
