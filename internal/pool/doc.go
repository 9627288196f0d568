// Package pool is the host graphics-memory pool that all vGPUs of one gmigd
// share (docs/device-abi.md §1 and §1.1, "Isolation").
//
// A Pool is one reserved range of gmigd's address space, sized once, that
// maps nothing by itself. Each vGPU gets a Partition of it: a page-aligned
// byte range backed by a memfd of its own, created for that partition,
// sized exactly to it and sealed so its size never changes, and mapped
// shared over the partition's part of the range. gmigd's engine and shadow
// GTT address the whole pool by offset (Mem); a vGPU's client (QEMU) is
// handed only its partition's memfd (File), which it mmaps at offset 0 as
// the vGPU's aperture BAR, so guest CPU stores and gmigd's engine see the
// same bytes with no copies and no traps.
//
// A partition may also have device-local memory (docs/device-abi.md §1.3):
// AllocLocal maps private anonymous memory right after the graphics
// memory, so the engine and shadow GTT reach it by pool offset like the
// rest, while no file holds it and no client is ever handed it.
// DiscardLocal hands part of it back to the kernel (it reads as zeros
// after): where local memory lives on a GPU, the range is only a
// migration's receive buffer, and the destination discards what it has
// copied to the GPU.
//
// Isolation. A partition's memfd holds that partition's bytes and nothing
// else: a client cannot reach another partition through it at any offset,
// nor shrink it under gmigd (a SIGBUS in gmigd would take every vGPU down).
// Free maps the range back to reserved address space and closes the pool's
// descriptor; a client that still maps the old memfd keeps those pages to
// itself, and a partition placed at the same offset later gets a fresh
// memfd, all zeros, that the old client never had.
//
// Partitions are placed first fit. On a migration destination the same vGPU
// usually lands at a different offset than on the source; AllocAt forces a
// placement (tests use it to make the difference certain).
//
// A Pool is safe for concurrent use; one mutex guards the allocation map
// and the mappings (no other locks, so there is no lock order). Mem and the
// slices taken from it stay valid until Close, which unmaps them; a freed
// partition's bytes fault from Free on, so callers must stop touching a
// partition before freeing it and the pool before closing it.
package pool
