// Package gtt is the vGPU's graphics translation table (docs/device-abi.md
// §1, §3.1): the guest GTT the guest writes through the trapped GTT window,
// and the shadow GTT gmigd derives from it.
//
// A guest entry maps a graphics page (graphics address >> 12) to an aperture
// page, that is a page of the vGPU's own graphics memory, numbered from 0.
// Write validates every entry before it takes effect: reserved bits must be
// clear and a valid entry must name a page below the vGPU's page count, so a
// guest can never reach host memory outside its own partition. The shadow
// entry of a valid guest entry is the host pool byte offset of that page
// (partition base + page*4096) with the entry's flags; Resolve walks the
// shadow to turn a graphics-address range into host extents for the engine.
// A vGPU with device-local memory (ABI 1.2, NewWithLocal) has its local
// pages right after its graphics memory in the pool: an entry with
// abi.GTTLocal names local page p, shadowed at base + (pages+p)*4096, so
// the engine reaches both the same way.
//
// The guest's view is what migrates (Save/Restore); the shadow never does.
// On a destination the vGPU's partition sits at another pool offset: the
// table is created at that base and Restore rebuilds the shadow against it
// (Dynamic Graphics Address Remapping) while the guest reads back exactly
// what it wrote.
//
// Concurrency: one sync.RWMutex guards the table. Write, Read, Reset
// and Restore come from the vfio server goroutine and take it exclusively
// (Read shared); Resolve comes from the engine goroutine and takes it
// shared. It is the only lock in the package and no method calls out while
// holding it, so it can be taken under any caller's lock; callers must not
// hold it across calls into other packages (there is no way to). Methods
// named ...Locked expect the caller to hold it.
package gtt
