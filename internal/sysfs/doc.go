// Package sysfs is the guest.Bus of a real Linux guest: it finds the vGPU
// under /sys/bus/pci/devices by vendor and device ID and drives it from user
// space, with no kernel module of ours:
//
//   - BAR0 and BAR2 are mmap'd from the device's resource0 and resource2
//     files; register accesses are single 4- or 8-byte loads and stores, so
//     each one traps to gmigd exactly as a driver's readl/writel would.
//   - DMA memory is hugetlb pages locked in memory, whose guest-physical
//     addresses come from /proc/self/pagemap (a 2 MiB huge page is
//     physically contiguous).
//   - Interrupts (Options.IRQ) are INTx through uio_pci_generic (a stock
//     Linux module): a read of /dev/uioN blocks until INTx fires, and user
//     space clears the INTx-disable bit it set; or MSI through vfio-pci
//     (stock too), which uio cannot do: the device is bound to vfio-pci and
//     opened through a VFIO container, and its MSI vector signals an
//     eventfd (vfio.go). vfio-pci needs the device in an IOMMU group: a
//     (virtual) IOMMU's, or one vfio makes up in its no-IOMMU mode where
//     the kernel has it. Under an IOMMU the DMA memory is mapped at I/O
//     addresses equal to its physical addresses, so the device is given
//     the same addresses either way. BARs stay mapped through sysfs.
//   - Modules load in the order their modules.dep gives (modules.go).
//
// The VFIO ioctls and structs are in package vfioabi; the ioctl calls are
// in vfio_unsafe.go. It needs root (pagemap addresses, module loading,
// sysfs writes).
package sysfs
