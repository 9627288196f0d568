// Package pool is the host graphics-memory pool that all vGPUs of one gmigd
// share (DESIGN.md, "The device").
//
// A Pool is one memfd, sized once and mapped MAP_SHARED into gmigd. Each vGPU
// gets a Partition of it: a page-aligned byte range that backs its graphics
// memory. The memfd itself is handed to QEMU (File), which mmaps the
// partition's range as the vGPU's aperture BAR, so guest CPU stores and
// gmigd's engine see the same bytes with no copies and no traps.
//
// Partitions are placed first fit. On a migration destination the same vGPU
// usually lands at a different offset than on the source; AllocAt forces a
// placement (tests use it to make the difference certain). Free zeroes the
// range before it can be handed out again, so a new tenant never sees an old
// tenant's data: every byte a fresh partition holds is zero.
//
// A Pool is safe for concurrent use; one mutex guards the allocation map
// (no other locks, so there is no lock order). Mem and the slices taken from
// it stay valid until Close, which unmaps them: callers must stop touching
// pool memory before closing the pool.
package pool
