package vfioabi

import (
	"testing"
	"unsafe"
)

// TestSizes checks each struct against sizeof of the C struct it mirrors
// (include/uapi/linux/vfio.h on x86-64).
func TestSizes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uintptr
	}{
		{"vfio_group_status", unsafe.Sizeof(GroupStatus{}), 8},
		{"vfio_device_info", unsafe.Sizeof(DeviceInfo{}), 24},
		{"vfio_region_info", unsafe.Sizeof(RegionInfo{}), 32},
		{"vfio_irq_info", unsafe.Sizeof(IRQInfo{}), 16},
		{"vfio_irq_set (fixed part)", unsafe.Sizeof(IRQSet{}), 20},
		{"vfio_iommu_type1_dma_map", unsafe.Sizeof(DMAMap{}), 32},
		{"vfio_iommu_type1_dma_unmap", unsafe.Sizeof(DMAUnmap{}), 24},
	} {
		if c.got != c.want {
			t.Errorf("%s: %d bytes, want %d", c.name, c.got, c.want)
		}
	}
	if off := unsafe.Offsetof(RegionInfo{}.Size); off != 16 {
		t.Errorf("vfio_region_info.size at %d, want 16", off)
	}
	if off := unsafe.Offsetof(DMAMap{}.IOVA); off != 16 {
		t.Errorf("vfio_iommu_type1_dma_map.iova at %d, want 16", off)
	}
}

// TestIoctlNumbers checks the ioctl numbers against the values the C
// macros expand to (printed by a C program including linux/vfio.h).
func TestIoctlNumbers(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uint
	}{
		{"VFIO_GET_API_VERSION", GetAPIVersion, 0x3b64},
		{"VFIO_CHECK_EXTENSION", CheckExtension, 0x3b65},
		{"VFIO_SET_IOMMU", SetIOMMU, 0x3b66},
		{"VFIO_GROUP_GET_STATUS", GroupGetStatus, 0x3b67},
		{"VFIO_GROUP_SET_CONTAINER", GroupSetContainer, 0x3b68},
		{"VFIO_GROUP_UNSET_CONTAINER", GroupUnsetContainer, 0x3b69},
		{"VFIO_GROUP_GET_DEVICE_FD", GroupGetDeviceFD, 0x3b6a},
		{"VFIO_DEVICE_GET_INFO", DeviceGetInfo, 0x3b6b},
		{"VFIO_DEVICE_GET_REGION_INFO", DeviceGetRegionInfo, 0x3b6c},
		{"VFIO_DEVICE_GET_IRQ_INFO", DeviceGetIRQInfo, 0x3b6d},
		{"VFIO_DEVICE_SET_IRQS", DeviceSetIRQs, 0x3b6e},
		{"VFIO_DEVICE_RESET", DeviceReset, 0x3b6f},
		{"VFIO_IOMMU_MAP_DMA", IOMMUMapDMA, 0x3b71},
		{"VFIO_IOMMU_UNMAP_DMA", IOMMUUnmapDMA, 0x3b72},
	} {
		if c.got != c.want {
			t.Errorf("%s = %#x, want %#x", c.name, c.got, c.want)
		}
	}
}
