// Package abi is the gmig vGPU's device ABI: PCI identity, BAR layout,
// register offsets and bits, the GTT entry format and the command-ring
// encoding. It holds constants and plain wire structs only, no logic.
//
// The normative description is docs/device-abi.md; every block below names
// the section of that document it mirrors. A change that breaks a guest gets a
// new Version and new names; existing constants are never edited.
package abi

// Version is the ABI version the device reports in RegVersion
// (docs/device-abi.md §1): major in the high 16 bits, minor in the low 16.
const (
	VersionMajor = 1
	VersionMinor = 3 // 1.1 added KERNEL_LOAD_MODULE (CapModules); 1.2 device-local memory (CapLocalMem); 1.3 device addresses and LAUNCH_GRID (v13.go)
	Version      = VersionMajor<<16 | VersionMinor
)

// PageSize is the graphics page size (docs/device-abi.md §1).
const (
	PageShift = 12
	PageSize  = 1 << PageShift
)

// PCI identity (docs/device-abi.md §2). 0x1234 is the vendor ID QEMU uses for
// its own emulated devices; no Linux driver binds 0x1234:0x676d, so a guest
// kernel leaves the device to the guest program.
const (
	PCIVendorID     = 0x1234
	PCIDeviceID     = 0x676d // "gm"
	PCISubVendorID  = 0x1234
	PCISubDeviceID  = 0x0001
	PCIRevision     = 0x01
	PCIClassCode    = 0x030200 // display controller, 3D controller
	PCIInterruptPin = 1        // INTA#
)

// BARs (docs/device-abi.md §2). BAR0 is trapped registers plus the GTT
// window; BAR2 (64-bit, prefetchable, using BAR2+BAR3) is the aperture, a
// direct mapping of the vGPU's graphics memory.
const (
	BARRegs     = 0
	BARAperture = 2

	BAR0Size = 1 << 20 // 1 MiB: registers 0x0-0xfff, GTT window at GTTOffset
)

// Register offsets in BAR0 (docs/device-abi.md §3). Registers marked 64 are
// 8 bytes wide and may also be accessed as two 4-byte halves.
const (
	RegID            = 0x000 // ro 32: IDMagic
	RegVersion       = 0x004 // ro 32: Version
	RegCaps          = 0x008 // ro 32: Cap* bits
	RegMemSize       = 0x010 // ro 64: graphics memory (aperture) bytes
	RegGTTEntries    = 0x018 // ro 32: number of GTT entries
	RegGTTOffset     = 0x01c // ro 32: byte offset of the GTT window in BAR0
	RegRingBase      = 0x020 // rw 64: graphics address of the ring, page aligned
	RegRingSize      = 0x028 // rw 32: ring bytes, power of two, RingMinSize..RingMaxSize
	RegRingHead      = 0x02c // ro 32: byte offset of the next command the engine reads
	RegRingTail      = 0x030 // ro 32: last tail accepted through RegDoorbell
	RegDoorbell      = 0x034 // wo 32: new tail; the engine runs commands up to it
	RegControl       = 0x038 // rw 32: Control* bits
	RegStatus        = 0x03c // ro 32: Status* bits
	RegFenceDone     = 0x040 // ro 64: value of the last completed fence
	RegIntStatus     = 0x050 // rw1c 32: Int* bits pending
	RegIntMask       = 0x054 // rw 32: Int* bits enabled
	RegErrStatus     = 0x058 // rw1c 32: Err* bits
	RegErrGTTIndex   = 0x05c // ro 32: GTT index of the last refused entry
	RegErrRingOffset = 0x060 // ro 32: ring offset of the last failed command
	RegErrOpcode     = 0x064 // ro 32: opcode of the last failed command
	RegHeartbeat     = 0x070 // rw 64: guest heartbeat; each write is time-stamped by the host
	RegCmdsDone      = 0x078 // ro 64: commands retired since reset
	RegScratch       = 0x080 // rw 32: free for the guest; no effect
	RegLocalMemSize  = 0x088 // ro 64: device-local memory bytes (ABI 1.2; 0 without CapLocalMem)

	// Streams (ABI 1.2, CapStreams; docs/device-abi.md §5.1): stream i's
	// error at RegStreamErr + 4*i (rw 32: a CUDA-style code, 0 none;
	// writing clears it) and its last retired fence at RegStreamFence + 8*i
	// (ro 64). Without CapStreams these offsets read 0 as before.
	RegStreamErr   = 0x100
	RegStreamFence = 0x800

	RegsEnd = 0x1000 // first byte past the register block

	IDMagic = 0x47494d47 // "GMIG" read as little-endian bytes

	GTTOffset     = 0x80000 // GTT window: entry i at GTTOffset + 8*i
	GTTMaxEntries = (BAR0Size - GTTOffset) / GTTEntrySize
)

// Capability bits in RegCaps (docs/device-abi.md §3).
const (
	CapKernels   = 1 << 0 // KERNEL_LOAD/UNLOAD/LAUNCH and the kernels of §6
	CapFenceMem  = 1 << 1 // FENCE may write its value to graphics memory
	CapHeartbeat = 1 << 2 // RegHeartbeat is time-stamped by the host
	CapModules   = 1 << 3 // KERNEL_LOAD_MODULE: guest PTX kernels (ABI 1.1; only back ends that run them)
	CapLocalMem  = 1 << 4 // device-local memory: RegLocalMemSize, GTTLocal entries (ABI 1.2; vGPUs that have it)
	CapStreams   = 1 << 5 // stream ids in command headers, per-stream fences and errors (ABI 1.2; vGPUs with local memory)
)

// RegControl bits (docs/device-abi.md §3).
const (
	ControlEnable = 1 << 0  // fetch commands; setting it checks the ring and zeroes head and tail
	ControlReset  = 1 << 31 // write 1: device reset (registers, GTT, kernels); reads 0
)

// RegStatus bits (docs/device-abi.md §3).
const (
	StatusEnabled = 1 << 0
	StatusBusy    = 1 << 1 // head != tail
)

// Interrupt bits in RegIntStatus / RegIntMask (docs/device-abi.md §4).
const (
	IntFence = 1 << 0 // a FENCE with FenceInterrupt completed
	IntError = 1 << 1 // a bit was set in RegErrStatus
)

// Error bits in RegErrStatus (docs/device-abi.md §4).
const (
	ErrGTTEntry  = 1 << 0 // a GTT write was refused (RegErrGTTIndex says which)
	ErrCommand   = 1 << 1 // a malformed command; the rest of the batch was dropped
	ErrPageFault = 1 << 2 // a command touched an unmapped or read-only graphics page
	ErrDMA       = 1 << 3 // a DMA touched guest memory that is not mapped
	ErrDoorbell  = 1 << 4 // a doorbell tail was misaligned, out of range, or the ring is disabled
	ErrRing      = 1 << 5 // ControlEnable with an invalid ring base or size
	ErrKernel    = 1 << 6 // unknown kernel handle or kind, or bad launch arguments
	ErrMMIO      = 1 << 7 // an access of unsupported size or alignment
)

// Ring limits (docs/device-abi.md §5).
const (
	RingMinSize = PageSize
	RingMaxSize = 1 << 20
)

// GTT entry format (docs/device-abi.md §3.1). An entry maps one graphics page
// (graphics address >> PageShift = GTT index) to one page of the vGPU's own
// graphics memory, named by its aperture page number.
const (
	GTTEntrySize    = 8
	GTTValid        = 1 << 0
	GTTWritable     = 1 << 1
	GTTFlagsMask    = GTTValid | GTTWritable
	GTTPageShift    = PageShift
	GTTPageMask     = (1<<40 - 1) << GTTPageShift // bits 12..51: aperture page number
	GTTReservedMask = ^uint64(GTTFlagsMask | GTTPageMask)
)

// Device-local GTT entries (docs/device-abi.md §3.1, ABI 1.2). On a vGPU
// with CapLocalMem, bit 2 of an entry says its page number names a page of
// device-local memory (below RegLocalMemSize/PageSize) instead of an
// aperture page; on any other vGPU bit 2 stays reserved (GTTReservedMask).
const (
	GTTLocal                = 1 << 2
	GTTReservedMaskLocalMem = ^uint64(GTTFlagsMask | GTTLocal | GTTPageMask)
)

// Command opcodes (docs/device-abi.md §6).
const (
	OpNop          = 0
	OpCopy         = 1
	OpFill         = 2
	OpDMAToGfx     = 3 // guest RAM -> graphics memory
	OpDMAFromGfx   = 4 // graphics memory -> guest RAM
	OpFence        = 5
	OpKernelLoad   = 6
	OpKernelUnload = 7
	OpLaunch       = 8
	// OpKernelLoadModule loads a guest PTX module (ABI 1.1, §6.8).
	OpKernelLoadModule = 9
	// OpLaunchParams launches a guest module with a parameter buffer (ABI
	// 1.2, §6.9).
	OpLaunchParams = 10
	NumOps         = 12 // opcodes defined (1.0 had 9, 1.1 had 10, 1.2 had 11)
)

// Command header flags (docs/device-abi.md §6).
const (
	FenceInterrupt = 1 << 0 // raise IntFence when the fence completes
	FenceWriteMem  = 1 << 1 // also write the 8-byte value at the fence address
)

// Stream ids (docs/device-abi.md §5.1, ABI 1.2, CapStreams): bits 8-15 of
// every command's header flags name its stream; 0 is the default stream
// every command of a 1.1 guest is on. Without CapStreams they stay
// reserved.
const (
	CmdStreamShift = 8
	CmdStreamMask  = 0xff << CmdStreamShift
	MaxStreams     = 256
)

// Stream error codes in RegStreamErr (docs/device-abi.md §5.1): the CUresult
// values of the CUDA driver API (cuda.h) a guest CUDA library returns as
// they are.
const (
	CudaSuccess             = 0   // CUDA_SUCCESS
	CudaErrorInvalidValue   = 1   // CUDA_ERROR_INVALID_VALUE: bad arguments, a DMA outside guest memory
	CudaErrorInvalidImage   = 200 // CUDA_ERROR_INVALID_IMAGE: a module that does not load
	CudaErrorInvalidHandle  = 400 // CUDA_ERROR_INVALID_HANDLE: an unknown kernel handle or kind
	CudaErrorIllegalAddress = 700 // CUDA_ERROR_ILLEGAL_ADDRESS: a page fault
	CudaErrorLaunchFailed   = 719 // CUDA_ERROR_LAUNCH_FAILED: a kernel that failed
	CudaErrorUnknown        = 999 // CUDA_ERROR_UNKNOWN: any other failure
)

// Command sizes in bytes, header included (docs/device-abi.md §6).
const (
	CmdHeaderSize       = 8
	CmdAlign            = 8
	CmdMaxSize          = 256
	CmdCopySize         = 32
	CmdFillSize         = 32
	CmdDMASize          = 32
	CmdFenceSize        = 24
	CmdKernelLoadSize   = 16
	CmdKernelUnloadSize = 16
	CmdLaunchBaseSize   = 16 // plus 8 per argument
	LaunchMaxArgs       = 8

	CmdKernelLoadModuleSize = 32 // ABI 1.1
	CmdLaunchParamsSize     = 40 // ABI 1.2
)

// LaunchParamsMax bounds a LAUNCH_PARAMS parameter buffer (docs/device-abi.md
// §6.9): 4 KiB, the CUDA driver's kernel-parameter limit before CUDA 12.1
// (the CUDA C Programming Guide, "Function Parameters").
const LaunchParamsMax = 4096

// Guest modules (docs/device-abi.md §6.8, ABI 1.1).
const (
	// KernelModule is the kind the API log and the saved state give a
	// kernel object made by KERNEL_LOAD_MODULE; KERNEL_LOAD refuses it.
	KernelModule = 0x100
	// ModuleMaxImage bounds a module image (entry name, NUL, PTX text).
	ModuleMaxImage = 1 << 20
	// ModuleMaxEntry bounds the entry name.
	ModuleMaxEntry = 255
	// ModuleBlockThreads is the block size guest kernels run with: a LAUNCH
	// of n threads runs ceil(n / ModuleBlockThreads) blocks of this many.
	ModuleBlockThreads = 256
)

// Kernel kinds for KERNEL_LOAD (docs/device-abi.md §7).
const (
	KernelSaxpy   = 1  // y[i] = a*x[i] + y[i], float32, no fused multiply-add
	KernelStencil = 2  // one 5-point Jacobi step over a width x height float32 grid
	KernelRender  = 3  // rewrites a width x height RGBA8 framebuffer for one frame
	MaxKernels    = 64 // loaded kernel objects per vGPU
)

// CmdHeader mirrors the 8-byte header that starts every command
// (docs/device-abi.md §6), little-endian.
type CmdHeader struct {
	Opcode uint16
	Flags  uint16
	Size   uint32 // bytes, header included, multiple of CmdAlign
}

// CmdCopy mirrors COPY (docs/device-abi.md §6.1): Len bytes from graphics
// address Src to Dst. Overlapping ranges behave as memmove.
type CmdCopy struct {
	Header CmdHeader
	Dst    uint64
	Src    uint64
	Len    uint64
}

// CmdFill mirrors FILL (§6.2): Len bytes at Dst filled with the
// little-endian 32-bit Pattern repeated; Len and Dst are multiples of 4.
type CmdFill struct {
	Header  CmdHeader
	Dst     uint64
	Len     uint64
	Pattern uint32
	Pad     uint32
}

// CmdDMA mirrors DMA_TO_GFX and DMA_FROM_GFX (§6.3): Len bytes between
// guest-physical address GPA and graphics address GA. The opcode gives the
// direction.
type CmdDMA struct {
	Header CmdHeader
	GA     uint64
	GPA    uint64
	Len    uint64
}

// CmdFence mirrors FENCE (§6.4): when every earlier command has retired,
// RegFenceDone becomes Value; with FenceWriteMem the value is also written
// at graphics address Addr (8-byte aligned); with FenceInterrupt IntFence is
// raised.
type CmdFence struct {
	Header CmdHeader
	Value  uint64
	Addr   uint64
}

// CmdKernelLoad mirrors KERNEL_LOAD (§6.5): creates kernel object Handle
// (guest-chosen, nonzero, unused) of kind Kind.
type CmdKernelLoad struct {
	Header CmdHeader
	Handle uint32
	Kind   uint32
}

// CmdKernelUnload mirrors KERNEL_UNLOAD (§6.6).
type CmdKernelUnload struct {
	Header CmdHeader
	Handle uint32
	Pad    uint32
}

// CmdLaunchBase mirrors the fixed part of LAUNCH (§6.7); NArgs 64-bit
// arguments follow it.
type CmdLaunchBase struct {
	Header CmdHeader
	Handle uint32
	NArgs  uint32
}

// CmdLaunchParams mirrors LAUNCH_PARAMS (§6.9, ABI 1.2): runs guest module
// Handle on Threads threads with the ParamsLen-byte parameter buffer at
// graphics address Params, laid out as the module's PTX declares its
// parameters.
type CmdLaunchParams struct {
	Header    CmdHeader
	Handle    uint32
	Pad       uint32
	Threads   uint64
	Params    uint64
	ParamsLen uint32
	Pad2      uint32
}

// CmdKernelLoadModule mirrors KERNEL_LOAD_MODULE (§6.8, ABI 1.1): creates
// kernel object Handle from the ImageLen-byte image at graphics address
// Image (the entry name, a NUL byte, the PTX text); LAUNCH then takes
// NArgs arguments, the first of them the thread count.
type CmdKernelLoadModule struct {
	Header   CmdHeader
	Handle   uint32
	NArgs    uint32
	Image    uint64
	ImageLen uint32
	Pad      uint32
}
