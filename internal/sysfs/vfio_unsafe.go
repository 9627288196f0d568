package sysfs

import (
	"encoding/binary"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/internal/sysfs/vfioabi"
)

// The VFIO ioctls (vfioabi; include/uapi/linux/vfio.h). Each returns the
// ioctl's errno as its error.

func ioctl(fd int, req uintptr, arg uintptr) (uintptr, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, arg)
	if errno != 0 {
		return r, errno
	}
	return r, nil
}

func ioctlPtr(fd int, req uintptr, p unsafe.Pointer) (uintptr, error) {
	r, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), req, uintptr(p))
	if errno != 0 {
		return r, errno
	}
	return r, nil
}

func vfioAPIVersion(container int) (int, error) {
	r, err := ioctl(container, vfioabi.GetAPIVersion, 0)
	return int(r), err
}

func vfioCheckExtension(container, ext int) (bool, error) {
	r, err := ioctl(container, vfioabi.CheckExtension, uintptr(ext))
	return r > 0, err
}

func vfioSetIOMMU(container, typ int) error {
	_, err := ioctl(container, vfioabi.SetIOMMU, uintptr(typ))
	return err
}

func vfioGroupStatus(group int) (vfioabi.GroupStatus, error) {
	st := vfioabi.GroupStatus{Argsz: uint32(unsafe.Sizeof(vfioabi.GroupStatus{}))}
	_, err := ioctlPtr(group, vfioabi.GroupGetStatus, unsafe.Pointer(&st))
	return st, err
}

func vfioGroupSetContainer(group, container int) error {
	fd := int32(container)
	_, err := ioctlPtr(group, vfioabi.GroupSetContainer, unsafe.Pointer(&fd))
	return err
}

func vfioGroupDeviceFD(group int, name string) (int, error) {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return -1, err
	}
	r, err := ioctlPtr(group, vfioabi.GroupGetDeviceFD, unsafe.Pointer(p))
	if err != nil {
		return -1, err
	}
	return int(r), nil
}

func vfioIRQInfo(device int, index uint32) (vfioabi.IRQInfo, error) {
	info := vfioabi.IRQInfo{Argsz: uint32(unsafe.Sizeof(vfioabi.IRQInfo{})), Index: index}
	_, err := ioctlPtr(device, vfioabi.DeviceGetIRQInfo, unsafe.Pointer(&info))
	return info, err
}

// irqSet encodes a struct vfio_irq_set followed by its data.
func irqSet(flags, index, start, count uint32, data []byte) []byte {
	n := uint32(unsafe.Sizeof(vfioabi.IRQSet{})) + uint32(len(data))
	b := make([]byte, 0, n)
	for _, v := range []uint32{n, flags, index, start, count} {
		b = binary.NativeEndian.AppendUint32(b, v)
	}
	return append(b, data...)
}

// vfioSetIRQEventfds routes vectors start.. of index to the eventfds (-1
// de-assigns a vector).
func vfioSetIRQEventfds(device int, index, start uint32, fds []int32) error {
	var data []byte
	for _, fd := range fds {
		data = binary.NativeEndian.AppendUint32(data, uint32(fd))
	}
	b := irqSet(vfioabi.IRQSetDataEventfd|vfioabi.IRQSetActionTrig, index, start, uint32(len(fds)), data)
	_, err := ioctlPtr(device, vfioabi.DeviceSetIRQs, unsafe.Pointer(&b[0]))
	return err
}

// vfioDisableIRQ tears down every vector of index (DATA_NONE, TRIGGER,
// count 0).
func vfioDisableIRQ(device int, index uint32) error {
	b := irqSet(vfioabi.IRQSetDataNone|vfioabi.IRQSetActionTrig, index, 0, 0, nil)
	_, err := ioctlPtr(device, vfioabi.DeviceSetIRQs, unsafe.Pointer(&b[0]))
	return err
}

// vfioMapDMA maps mem (pinned by the kernel for as long as it is mapped) at
// iova, readable and writable by the device.
func vfioMapDMA(container int, mem []byte, iova uint64) error {
	m := vfioabi.DMAMap{
		Argsz: uint32(unsafe.Sizeof(vfioabi.DMAMap{})),
		Flags: vfioabi.DMAMapFlagRead | vfioabi.DMAMapFlagWrite,
		Vaddr: uint64(uintptr(unsafe.Pointer(&mem[0]))),
		IOVA:  iova,
		Size:  uint64(len(mem)),
	}
	_, err := ioctlPtr(container, vfioabi.IOMMUMapDMA, unsafe.Pointer(&m))
	runtime.KeepAlive(mem)
	return err
}

func vfioUnmapDMA(container int, iova, size uint64) error {
	u := vfioabi.DMAUnmap{Argsz: uint32(unsafe.Sizeof(vfioabi.DMAUnmap{})), IOVA: iova, Size: size}
	_, err := ioctlPtr(container, vfioabi.IOMMUUnmapDMA, unsafe.Pointer(&u))
	return err
}
