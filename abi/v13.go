package abi

// ABI 1.3 (docs/device-abi.md §1.4, §6.10): device addresses and kernel
// launches with grids, the shape cuLaunchKernel has. A vGPU announces them
// with CapDeviceAddr (set only together with CapLocalMem); a guest that
// does not know the bit sees the 1.2 device.
const (
	// CapDeviceAddr says RegDeviceAddrBase is valid: device-local byte l
	// (§1.3) has the device address RegDeviceAddrBase + l, which kernels
	// launched with LAUNCH_GRID dereference. Aperture bytes have no device
	// address: such kernels reach device-local memory only.
	CapDeviceAddr = 1 << 6
	// CapLaunchGrid says LAUNCH_GRID runs guest modules (set with
	// CapModules and CapDeviceAddr on back ends that run them).
	CapLaunchGrid = 1 << 7

	// RegDeviceAddrBase (ro 64) is the device address of device-local
	// byte 0, 2 MiB aligned; 0 without CapDeviceAddr. It is stable for the vGPU's life, across
	// save/restore and migration: a destination that cannot give the same
	// value refuses the migration.
	RegDeviceAddrBase = 0x090

	// OpLaunchGrid runs a guest module on a grid of blocks with a
	// parameter buffer (§6.10).
	OpLaunchGrid = 11

	// CmdLaunchGridSize is LAUNCH_GRID's size in bytes, header included.
	CmdLaunchGridSize = 56

	// LaunchGridMaxBlockThreads bounds blockX*blockY*blockZ: 1024, every
	// CUDA GPU since compute capability 2.0 (CUDA C Programming Guide,
	// "Compute Capabilities", maximum threads per block).
	LaunchGridMaxBlockThreads = 1024
	// LaunchGridMaxShared bounds the dynamic shared memory of one launch:
	// 48 KiB, what every CUDA GPU gives a block without an opt-in
	// attribute (same table).
	LaunchGridMaxShared = 48 << 10
)

// CmdLaunchGrid mirrors LAUNCH_GRID (§6.10, ABI 1.3): runs guest module
// Handle on a GridX×GridY×GridZ grid of BlockX×BlockY×BlockZ blocks with
// SharedBytes of dynamic shared memory and the ParamsLen-byte parameter
// buffer at graphics address Params, laid out as the module's PTX declares
// its parameters (as LAUNCH_PARAMS). Pointers among the parameters are
// device addresses (CapDeviceAddr).
type CmdLaunchGrid struct {
	Header      CmdHeader
	Handle      uint32
	SharedBytes uint32
	GridX       uint32
	GridY       uint32
	GridZ       uint32
	BlockX      uint32
	BlockY      uint32
	BlockZ      uint32
	Params      uint64
	ParamsLen   uint32
	Pad         uint32
}
