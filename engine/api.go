package engine

import (
	"github.com/gmig-dev/gmig/gtt"
)

// Resolver translates a graphics-address range into host backing extents
// through the shadow GTT. write asks for writable pages. Any error is a page
// fault for the command that asked.
type Resolver interface {
	Resolve(ga, n uint64, write bool) ([]gtt.Extent, error)
}

// GuestMemory is DMA access to guest RAM by guest-physical address. Any error
// is a DMA fault for the command that asked.
type GuestMemory interface {
	ReadAt(p []byte, gpa uint64) error
	WriteAt(p []byte, gpa uint64) error
}

// Backend executes memory operations and kernels on host backing memory.
// Extents are byte ranges of the host pool. The software back end runs them
// in Go on the pool's mapping; a GPU back end runs them on device memory.
// Calls come from the engine goroutine only.
type Backend interface {
	// Name identifies the back end in logs and reports ("software", "nvidia").
	Name() string
	// Copy moves gtt.TotalLen(src) bytes; dst has the same total. Overlap
	// behaves as memmove in graphics-address order.
	Copy(dst, src []gtt.Extent) error
	// Fill writes pattern (little-endian) repeatedly; lengths are multiples of 4.
	Fill(dst []gtt.Extent, pattern uint32) error
	// Write copies src into dst (DMA into graphics memory).
	Write(dst []gtt.Extent, src []byte) error
	// Read copies src into dst (DMA out of graphics memory, ring fetch).
	Read(dst []byte, src []gtt.Extent) error
	// Saxpy computes y[i] = float32(float32(a*x[i]) + y[i]) for n float32s.
	Saxpy(n uint64, a float32, x, y []gtt.Extent) error
	// Stencil writes one 5-point Jacobi step of the w x h float32 grid in
	// into out (docs/device-abi.md §7.2).
	Stencil(w, h uint32, in, out []gtt.Extent) error
	// Render rewrites the w x h RGBA8 framebuffer fb for frame
	// (docs/device-abi.md §7.3).
	Render(w, h uint32, frame uint64, fb []gtt.Extent) error
	// Sync returns when all work issued so far has finished and its
	// results are in host memory (the aperture); the engine calls it
	// before a FENCE retires and when it quiesces.
	Sync() error

	// Guest modules (docs/device-abi.md §6.8). They are kernel objects that
	// live in the back end (compiled code on a device), so the engine,
	// which owns kernel objects' lifecycle, save and restore, reaches them
	// here; a back end that cannot run guest code refuses with an error
	// wrapping ErrNoModules, which the guest sees as ERR_STATUS.KERNEL.

	// LoadModule makes m kernel object handle.
	LoadModule(handle uint32, m Module) error
	// UnloadModule destroys it.
	UnloadModule(handle uint32) error
	// LaunchModule runs it with args (args[0] is the thread count) and
	// returns the host extents it wrote: a guest kernel's writes are not
	// known in advance, the back end finds them.
	LaunchModule(handle uint32, args []uint64) ([]gtt.Extent, error)
	// LaunchModuleParams runs it on threads threads with params, a
	// parameter buffer the engine checked against the module's PTX
	// parameter layout (LAUNCH_PARAMS, ABI 1.2, §6.9), and returns the
	// host extents it wrote.
	LaunchModuleParams(handle uint32, threads uint64, params []byte) ([]gtt.Extent, error)
	// LaunchGrid runs it on grid g with params, a parameter buffer the
	// engine checked against the module's PTX parameter layout
	// (LAUNCH_GRID, ABI 1.3, §6.10). The kernel reaches device-local
	// memory only, through device addresses, so its writes are the back
	// end's to track: none are returned. It may return before the kernel
	// has run: a kernel that fails is reported by a later Sync (or a later
	// operation) with an error wrapping ErrLaunchFailed.
	LaunchGrid(handle uint32, g Grid, params []byte) error
	// Place asks for graphics memory at device virtual address va (0 asks
	// nothing) and returns where it is: guest kernels see it there, and a
	// migration asks the destination for the source's address so that
	// device pointers stored in graphics memory stay valid. Back ends
	// without device addresses return 0.
	Place(va uint64) (uint64, error)
	// DeviceAddrBase is the device address of device-local byte 0
	// (RegDeviceAddrBase, ABI 1.3, docs/device-abi.md §1.4), 2 MiB
	// aligned and stable for the back end's life; 0 when the vGPU has no
	// device-local memory.
	DeviceAddrBase() uint64
}

// Grid is the shape of a LAUNCH_GRID (docs/device-abi.md §6.10), as
// cuLaunchKernel takes it.
type Grid struct {
	X, Y, Z                uint32 // blocks in the grid
	BlockX, BlockY, BlockZ uint32 // threads in a block
	SharedBytes            uint32 // dynamic shared memory of a block
}

// Fault describes a command that failed (docs/device-abi.md §4).
type Fault struct {
	Code       uint32 // one abi.Err* bit
	RingOffset uint32 // ring offset of the failed command
	Opcode     uint16 // its opcode (0 if the header itself was bad)
	Err        error  // what went wrong, for logs
}

// Events is how the engine reports to its device. Calls come from the engine
// goroutine; implementations must not call back into the engine.
type Events interface {
	// FenceCompleted is called when a FENCE retires; interrupt says whether
	// the command asked for an interrupt.
	FenceCompleted(value uint64, interrupt bool)
	// Faulted is called for each failed command.
	Faulted(f Fault)
	// Wrote is called after a command wrote graphics memory, with the host
	// extents it wrote (exact dirty tracking).
	Wrote(xs []gtt.Extent)
	// KernelLoaded and KernelUnloaded are called when a KERNEL_LOAD or
	// KERNEL_UNLOAD succeeds: kernel objects are state that does not live
	// in graphics memory (the API log records them).
	KernelLoaded(handle, kind uint32)
	KernelUnloaded(handle uint32)
}
