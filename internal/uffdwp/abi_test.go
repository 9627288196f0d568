package uffdwp

import (
	"testing"
	"unsafe"
)

// The ioctl numbers encode these sizes (include/uapi/asm-generic/ioctl.h,
// _IOC_SIZE), so a struct of another size is a different request.
func TestABISizes(t *testing.T) {
	for _, c := range []struct {
		name      string
		got, want uintptr
		ioctl     uint32
	}{
		{"uffdio_api", unsafe.Sizeof(uffdioAPI{}), 24, ioctlUffdioAPI},
		{"uffdio_register", unsafe.Sizeof(uffdioRegister{}), 32, ioctlUffdioRegister},
		{"uffdio_range", unsafe.Sizeof(uffdioRange{}), 16, ioctlUffdioUnregister},
		{"pm_scan_arg", unsafe.Sizeof(pmScanArg{}), 96, ioctlPagemapScan},
		{"page_region", unsafe.Sizeof(pageRegion{}), 24, 0},
	} {
		if c.got != c.want {
			t.Errorf("%s is %d bytes, want %d", c.name, c.got, c.want)
		}
		if c.ioctl != 0 && uintptr(c.ioctl>>16&0x3fff) != c.want {
			t.Errorf("%s: ioctl %#x encodes size %d, want %d", c.name, c.ioctl, c.ioctl>>16&0x3fff, c.want)
		}
	}
}
