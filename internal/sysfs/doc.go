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
//   - Interrupts arrive through uio_pci_generic (a stock Linux module): a
//     read of /dev/uioN blocks until INTx fires; writing 1 re-enables it.
//
// It needs root (pagemap addresses, module loading, sysfs writes).
package sysfs
