// Package vfioabi mirrors the parts of Linux's VFIO user-space ABI
// (include/uapi/linux/vfio.h) that the guest program uses to take MSI from
// a PCI function bound to vfio-pci: the container, group and device ioctls,
// the type-1 IOMMU's DMA mapping, and interrupt setup. It holds constants
// and plain structs only, no logic; every block names the part of vfio.h it
// mirrors, and a test checks each struct's size against the C layout.
//
// VFIO's ioctls are _IO(VFIO_TYPE, VFIO_BASE + n): the argument's size is
// not in the number; each struct instead starts with argsz, the bytes the
// caller provides.
package vfioabi

// API version and ioctl base (vfio.h: VFIO_API_VERSION, VFIO_TYPE,
// VFIO_BASE).
const (
	APIVersion = 0
	Type       = ';'
	Base       = 100
)

// Each ioctl number is the kernel's _IO(VFIO_TYPE, VFIO_BASE + n)
// (include/uapi/asm-generic/ioctl.h: no direction, no size bits), i.e.
// Type<<8 | (Base + n).

// Container ioctls, on /dev/vfio/vfio (vfio.h, "IOCTLs for VFIO file
// descriptor (/dev/vfio/vfio)").
const (
	GetAPIVersion  = Type<<8 | (Base + 0) // VFIO_GET_API_VERSION: returns APIVersion
	CheckExtension = Type<<8 | (Base + 1) // VFIO_CHECK_EXTENSION(int IOMMU type): > 0 when supported
	SetIOMMU       = Type<<8 | (Base + 2) // VFIO_SET_IOMMU(int IOMMU type)
)

// Group ioctls, on /dev/vfio/N or /dev/vfio/noiommu-N (vfio.h, "IOCTLs for
// GROUP file descriptors").
const (
	GroupGetStatus      = Type<<8 | (Base + 3) // VFIO_GROUP_GET_STATUS(struct vfio_group_status)
	GroupSetContainer   = Type<<8 | (Base + 4) // VFIO_GROUP_SET_CONTAINER(int32 *container fd)
	GroupUnsetContainer = Type<<8 | (Base + 5) // VFIO_GROUP_UNSET_CONTAINER
	GroupGetDeviceFD    = Type<<8 | (Base + 6) // VFIO_GROUP_GET_DEVICE_FD(char *device name): returns the fd
)

// Device ioctls, on the fd GroupGetDeviceFD returns (vfio.h, "IOCTLs for
// DEVICE file descriptors").
const (
	DeviceGetInfo       = Type<<8 | (Base + 7)  // VFIO_DEVICE_GET_INFO(struct vfio_device_info)
	DeviceGetRegionInfo = Type<<8 | (Base + 8)  // VFIO_DEVICE_GET_REGION_INFO(struct vfio_region_info)
	DeviceGetIRQInfo    = Type<<8 | (Base + 9)  // VFIO_DEVICE_GET_IRQ_INFO(struct vfio_irq_info)
	DeviceSetIRQs       = Type<<8 | (Base + 10) // VFIO_DEVICE_SET_IRQS(struct vfio_irq_set + data)
	DeviceReset         = Type<<8 | (Base + 11) // VFIO_DEVICE_RESET
)

// Type-1 IOMMU ioctls, on the container once SetIOMMU chose a type-1 IOMMU
// (vfio.h, "IOCTLs for the type1 IOMMU").
const (
	IOMMUMapDMA   = Type<<8 | (Base + 13) // VFIO_IOMMU_MAP_DMA(struct vfio_iommu_type1_dma_map)
	IOMMUUnmapDMA = Type<<8 | (Base + 14) // VFIO_IOMMU_UNMAP_DMA(struct vfio_iommu_type1_dma_unmap)
)

// IOMMU types for CheckExtension and SetIOMMU (vfio.h, "Extensions").
const (
	Type1IOMMU   = 1 // VFIO_TYPE1_IOMMU
	Type1v2IOMMU = 3 // VFIO_TYPE1v2_IOMMU
	// NoIOMMU is VFIO_NOIOMMU_IOMMU: no translation at all, the device
	// sees physical addresses. Only kernels built with
	// CONFIG_VFIO_NOIOMMU have it, and only with vfio's module parameter
	// enable_unsafe_noiommu_mode=1; its groups are /dev/vfio/noiommu-N.
	NoIOMMU = 8
)

// GroupStatus is struct vfio_group_status.
type GroupStatus struct {
	Argsz uint32
	Flags uint32
}

// GroupStatus flags (vfio.h, VFIO_GROUP_FLAGS_*).
const (
	GroupFlagsViable       = 1 << 0 // every device of the group is bound to a VFIO driver (or none)
	GroupFlagsContainerSet = 1 << 1
)

// DeviceInfo is struct vfio_device_info (with the pad field kernels since
// 6.2 declare; older kernels fill the first 20 bytes).
type DeviceInfo struct {
	Argsz      uint32
	Flags      uint32
	NumRegions uint32
	NumIRQs    uint32
	CapOffset  uint32
	Pad        uint32
}

// DeviceInfo flags (vfio.h, VFIO_DEVICE_FLAGS_*).
const (
	DeviceFlagsReset = 1 << 0 // the device supports VFIO_DEVICE_RESET
	DeviceFlagsPCI   = 1 << 1 // vfio-pci device
)

// RegionInfo is struct vfio_region_info.
type RegionInfo struct {
	Argsz     uint32
	Flags     uint32
	Index     uint32
	CapOffset uint32
	Size      uint64
	Offset    uint64 // where the region starts in the device fd (read, write, mmap)
}

// RegionInfo flags (vfio.h, VFIO_REGION_INFO_FLAG_*).
const (
	RegionInfoFlagRead  = 1 << 0
	RegionInfoFlagWrite = 1 << 1
	RegionInfoFlagMmap  = 1 << 2
	RegionInfoFlagCaps  = 1 << 3
)

// PCI region indices (vfio.h, enum VFIO_PCI_*_REGION_INDEX).
const (
	PCIBAR0RegionIndex   = 0
	PCIBAR2RegionIndex   = 2
	PCIROMRegionIndex    = 6
	PCIConfigRegionIndex = 7
)

// IRQInfo is struct vfio_irq_info.
type IRQInfo struct {
	Argsz uint32
	Flags uint32
	Index uint32
	Count uint32 // vectors of this index; 0 when the device has none
}

// IRQInfo flags (vfio.h, VFIO_IRQ_INFO_*).
const (
	IRQInfoEventfd    = 1 << 0
	IRQInfoMaskable   = 1 << 1
	IRQInfoAutomasked = 1 << 2
	IRQInfoNoResize   = 1 << 3
)

// IRQSet is the fixed part of struct vfio_irq_set; data (a bool or an int32
// eventfd per vector, or nothing) follows it in the same buffer, and Argsz
// counts both.
type IRQSet struct {
	Argsz uint32
	Flags uint32
	Index uint32
	Start uint32
	Count uint32
}

// IRQSet flags: exactly one data type and one action (vfio.h,
// VFIO_IRQ_SET_*).
const (
	IRQSetDataNone     = 1 << 0
	IRQSetDataBool     = 1 << 1
	IRQSetDataEventfd  = 1 << 2
	IRQSetActionMask   = 1 << 3
	IRQSetActionUnmask = 1 << 4
	IRQSetActionTrig   = 1 << 5
)

// PCI interrupt indices (vfio.h, enum VFIO_PCI_*_IRQ_INDEX).
const (
	PCIINTxIRQIndex = 0
	PCIMSIIRQIndex  = 1
	PCIMSIXIRQIndex = 2
)

// DMAMap is struct vfio_iommu_type1_dma_map.
type DMAMap struct {
	Argsz uint32
	Flags uint32
	Vaddr uint64 // process virtual address of the memory
	IOVA  uint64 // the address the device uses
	Size  uint64
}

// DMAMap flags (vfio.h, VFIO_DMA_MAP_FLAG_*).
const (
	DMAMapFlagRead  = 1 << 0 // the device may read
	DMAMapFlagWrite = 1 << 1 // the device may write
)

// DMAUnmap is struct vfio_iommu_type1_dma_unmap (without its flexible data
// array, unused without VFIO_DMA_UNMAP_FLAG_GET_DIRTY_BITMAP).
type DMAUnmap struct {
	Argsz uint32
	Flags uint32
	IOVA  uint64
	Size  uint64
}
