package sysfs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/internal/sysfs/vfioabi"
)

// MSI through VFIO. uio_pci_generic cannot deliver MSI; vfio-pci can, to an
// eventfd, once the device is in a VFIO container:
//
//  1. bind the device to vfio-pci (driver_override, then drivers_probe);
//     vfio-pci only takes a device that has an IOMMU group;
//  2. open its group, /dev/vfio/N, or /dev/vfio/noiommu-N for a group
//     vfio made up because no IOMMU translates the device (only kernels
//     built with CONFIG_VFIO_NOIOMMU, and only with vfio's parameter
//     enable_unsafe_noiommu_mode=1);
//  3. put the group in a container (/dev/vfio/vfio) and give the container
//     an IOMMU model: NoIOMMU for a noiommu group, type 1 otherwise;
//  4. get the device's fd; with a type-1 IOMMU, map the DMA memory at I/O
//     virtual addresses equal to its physical addresses, so the device
//     uses the same addresses either way;
//  5. SET_IRQS for the MSI index with an eventfd; each MSI the device sends
//     adds one to it.
//
// BAR0 and the aperture stay mapped through sysfs resourceN files, which
// vfio-pci does not claim exclusively.

// vfioPCIDriver is vfio-pci's name under /sys/bus/pci/drivers.
const vfioPCIDriver = "vfio-pci"

// ErrNoIOMMUGroup means vfio-pci would not take the device because nothing
// put it in an IOMMU group: no IOMMU translates it and vfio's no-IOMMU mode
// is missing or off.
var ErrNoIOMMUGroup = errors.New("sysfs: device has no IOMMU group")

// vfioDevice is the vGPU opened through VFIO.
type vfioDevice struct {
	container, group, device int // fds; -1 when not open
	groupPath                string
	iommu                    int         // vfioabi.NoIOMMU, Type1v2IOMMU or Type1IOMMU
	mapped                   [][2]uint64 // iova, size of each DMA mapping
}

// VFIOInfo describes how the device was opened through VFIO.
type VFIOInfo struct {
	Group string // /dev/vfio/N or /dev/vfio/noiommu-N
	IOMMU string // "noiommu", "type1v2" or "type1"
}

// openVFIO binds the device at dir to vfio-pci and opens it through VFIO.
func openVFIO(dir, sysRoot, devRoot string) (*vfioDevice, error) {
	if err := bindDriver(dir, sysRoot, vfioPCIDriver); err != nil {
		return nil, err
	}
	link, err := os.Readlink(filepath.Join(dir, "iommu_group"))
	if err != nil {
		return nil, fmt.Errorf("sysfs: %s bound to vfio-pci but: %w", filepath.Base(dir), err)
	}
	n, err := parseIOMMUGroup(link)
	if err != nil {
		return nil, err
	}
	v := &vfioDevice{container: -1, group: -1, device: -1}
	if err := v.open(devRoot, n, filepath.Base(dir)); err != nil {
		v.close()
		return nil, err
	}
	return v, nil
}

func (v *vfioDevice) open(devRoot string, group int, name string) error {
	var noIOMMU bool
	v.groupPath, noIOMMU = groupDevice(devRoot, group)
	var err error
	if v.container, err = unix.Open(filepath.Join(devRoot, "vfio/vfio"), unix.O_RDWR|unix.O_CLOEXEC, 0); err != nil {
		return fmt.Errorf("sysfs: opening the VFIO container: %w", err)
	}
	if ver, err := vfioAPIVersion(v.container); err != nil {
		return fmt.Errorf("sysfs: VFIO API version: %w", err)
	} else if ver != vfioabi.APIVersion {
		return fmt.Errorf("sysfs: VFIO API version %d, want %d", ver, vfioabi.APIVersion)
	}
	if v.group, err = unix.Open(v.groupPath, unix.O_RDWR|unix.O_CLOEXEC, 0); err != nil {
		return fmt.Errorf("sysfs: opening VFIO group %s: %w", v.groupPath, err)
	}
	st, err := vfioGroupStatus(v.group)
	if err != nil {
		return fmt.Errorf("sysfs: VFIO group %s status: %w", v.groupPath, err)
	}
	if st.Flags&vfioabi.GroupFlagsViable == 0 {
		return fmt.Errorf("sysfs: VFIO group %s is not viable (another device of the group has a non-VFIO driver)", v.groupPath)
	}
	if err := vfioGroupSetContainer(v.group, v.container); err != nil {
		return fmt.Errorf("sysfs: adding VFIO group %s to the container: %w", v.groupPath, err)
	}
	if v.iommu, err = pickIOMMU(v.container, noIOMMU); err != nil {
		return err
	}
	if err := vfioSetIOMMU(v.container, v.iommu); err != nil {
		return fmt.Errorf("sysfs: VFIO IOMMU model %s: %w (a type-1 IOMMU without interrupt remapping needs vfio_iommu_type1 allow_unsafe_interrupts=1)", iommuName(v.iommu), err)
	}
	if v.device, err = vfioGroupDeviceFD(v.group, name); err != nil {
		return fmt.Errorf("sysfs: VFIO device %s: %w", name, err)
	}
	return nil
}

// pickIOMMU returns the IOMMU model for the container: NoIOMMU for a
// noiommu group, else type 1 v2 or type 1, whichever the kernel has.
func pickIOMMU(container int, noIOMMU bool) (int, error) {
	want := []int{vfioabi.Type1v2IOMMU, vfioabi.Type1IOMMU}
	if noIOMMU {
		want = []int{vfioabi.NoIOMMU}
	}
	for _, t := range want {
		if ok, err := vfioCheckExtension(container, t); err == nil && ok {
			return t, nil
		}
	}
	return 0, fmt.Errorf("sysfs: the VFIO container offers none of the IOMMU models %v (is vfio_iommu_type1 loaded?)", want)
}

func iommuName(t int) string {
	switch t {
	case vfioabi.NoIOMMU:
		return "noiommu"
	case vfioabi.Type1v2IOMMU:
		return "type1v2"
	case vfioabi.Type1IOMMU:
		return "type1"
	}
	return strconv.Itoa(t)
}

// info describes the open device.
func (v *vfioDevice) info() VFIOInfo {
	return VFIOInfo{Group: v.groupPath, IOMMU: iommuName(v.iommu)}
}

// parseIOMMUGroup returns the group number from the target of a device's
// iommu_group link (".../kernel/iommu_groups/N").
func parseIOMMUGroup(link string) (int, error) {
	if filepath.Base(filepath.Dir(link)) != "iommu_groups" {
		return 0, fmt.Errorf("sysfs: iommu_group link %q is not under iommu_groups", link)
	}
	n, err := strconv.Atoi(filepath.Base(link))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("sysfs: iommu_group link %q does not end in a group number", link)
	}
	return n, nil
}

// groupDevice returns the VFIO group device of group n and whether it is a
// noiommu group (vfio names those /dev/vfio/noiommu-N).
func groupDevice(devRoot string, n int) (string, bool) {
	p := filepath.Join(devRoot, "vfio", "noiommu-"+strconv.Itoa(n))
	if _, err := os.Stat(p); err == nil {
		return p, true
	}
	return filepath.Join(devRoot, "vfio", strconv.Itoa(n)), false
}

// bindDriver binds the device at dir to driver (which must be loaded),
// unbinding another driver first, through driver_override and
// drivers_probe. A probe that fails leaves the device unbound, with the
// reason in the kernel log; bindDriver then says what it can find out.
func bindDriver(dir, sysRoot, driver string) error {
	name := filepath.Base(dir)
	if _, err := os.Stat(filepath.Join(sysRoot, "bus/pci/drivers", driver)); err != nil {
		return fmt.Errorf("sysfs: %s is not loaded: %w", driver, err)
	}
	if cur := boundDriver(dir); cur == driver {
		return nil
	} else if cur != "" {
		if err := os.WriteFile(filepath.Join(dir, "driver/unbind"), []byte(name), 0); err != nil {
			return fmt.Errorf("sysfs: unbinding %s from %s: %w", name, cur, err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "driver_override"), []byte(driver), 0); err != nil {
		return fmt.Errorf("sysfs: driver_override of %s: %w", name, err)
	}
	if err := os.WriteFile(filepath.Join(sysRoot, "bus/pci/drivers_probe"), []byte(name), 0); err != nil {
		return fmt.Errorf("sysfs: probing %s: %w", name, err)
	}
	if cur := boundDriver(dir); cur != driver {
		if driver == vfioPCIDriver {
			if why, noGroup := whyNoGroup(dir, sysRoot); noGroup {
				return fmt.Errorf("%w: vfio-pci did not bind %s: %s", ErrNoIOMMUGroup, name, why)
			}
		}
		return fmt.Errorf("sysfs: %s did not bind %s (bound: %q); see the kernel log", driver, name, cur)
	}
	return nil
}

// releaseDriver unbinds the device at dir from driver, if bound to it, and
// clears its driver_override.
func releaseDriver(dir, driver string) error {
	name := filepath.Base(dir)
	if boundDriver(dir) == driver {
		if err := os.WriteFile(filepath.Join(dir, "driver/unbind"), []byte(name), 0); err != nil {
			return fmt.Errorf("sysfs: unbinding %s from %s: %w", name, driver, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "driver_override"))
	if err == nil && strings.TrimSpace(string(b)) == driver {
		if err := os.WriteFile(filepath.Join(dir, "driver_override"), []byte("\n"), 0); err != nil {
			return fmt.Errorf("sysfs: clearing driver_override of %s: %w", name, err)
		}
	}
	return nil
}

// boundDriver returns the name of the driver bound to the device at dir, or
// "".
func boundDriver(dir string) string {
	link, err := os.Readlink(filepath.Join(dir, "driver"))
	if err != nil {
		return ""
	}
	return filepath.Base(link)
}

// whyNoGroup explains why vfio-pci refused a device without an IOMMU
// group: vfio registers a device only if it has one, and makes one up for a
// device no IOMMU translates only in no-IOMMU mode. noGroup is false when
// the device has a group (the refusal had another reason).
func whyNoGroup(dir, sysRoot string) (why string, noGroup bool) {
	if _, err := os.Lstat(filepath.Join(dir, "iommu_group")); err == nil {
		return "", false
	}
	var noiommu string
	b, err := os.ReadFile(filepath.Join(sysRoot, "module/vfio/parameters/enable_unsafe_noiommu_mode"))
	switch {
	case errors.Is(err, os.ErrNotExist):
		noiommu = "this kernel's vfio has no no-IOMMU mode (no parameter enable_unsafe_noiommu_mode: built without CONFIG_VFIO_NOIOMMU)"
	case err != nil:
		noiommu = "vfio's no-IOMMU mode: " + err.Error()
	case strings.TrimSpace(string(b)) != "Y":
		noiommu = "vfio's no-IOMMU mode is off (enable_unsafe_noiommu_mode=" + strings.TrimSpace(string(b)) + ")"
	default:
		noiommu = "vfio's no-IOMMU mode is on; see the kernel log"
	}
	groups, _ := filepath.Glob(filepath.Join(sysRoot, "kernel/iommu_groups/*"))
	return fmt.Sprintf("no IOMMU translates it (%d IOMMU groups in the system) and %s", len(groups), noiommu), true
}

// mapDMA makes the huge pages of h reachable by the device at I/O virtual
// addresses equal to their physical addresses. With no IOMMU the device
// sees physical addresses already.
func (v *vfioDevice) mapDMA(h *hugeMemory) error {
	if v.iommu == vfioabi.NoIOMMU {
		return nil
	}
	for i, pa := range h.phys {
		page := h.mem[i*hugePage : (i+1)*hugePage]
		if err := vfioMapDMA(v.container, page, pa); err != nil {
			return fmt.Errorf("sysfs: VFIO DMA map of %#x+%#x: %w", pa, hugePage, err)
		}
		v.mapped = append(v.mapped, [2]uint64{pa, hugePage})
	}
	return nil
}

// enableMSI routes the device's MSI vector 0 to a new eventfd.
func (v *vfioDevice) enableMSI() (*msiIRQ, error) {
	info, err := vfioIRQInfo(v.device, vfioabi.PCIMSIIRQIndex)
	if err != nil {
		return nil, fmt.Errorf("sysfs: VFIO MSI info: %w", err)
	}
	if info.Count == 0 || info.Flags&vfioabi.IRQInfoEventfd == 0 {
		return nil, fmt.Errorf("sysfs: the device has no MSI vector (count %d, flags %#x)", info.Count, info.Flags)
	}
	efd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("sysfs: eventfd: %w", err)
	}
	if err := vfioSetIRQEventfds(v.device, vfioabi.PCIMSIIRQIndex, 0, []int32{int32(efd)}); err != nil {
		unix.Close(efd)
		return nil, fmt.Errorf("sysfs: enabling MSI: %w", err)
	}
	return &msiIRQ{v: v, efd: efd}, nil
}

func (v *vfioDevice) close() {
	for _, m := range v.mapped {
		_ = vfioUnmapDMA(v.container, m[0], m[1])
	}
	v.mapped = nil
	for _, fd := range []*int{&v.device, &v.group, &v.container} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// msiIRQ is MSI vector 0 signalled on an eventfd.
type msiIRQ struct {
	v   *vfioDevice
	efd int
	n   uint64 // messages read from efd
}

// wait blocks until the eventfd counts at least one message and consumes
// all it counts. There is nothing to re-enable: MSI is an edge.
func (m *msiIRQ) wait(ctx context.Context) error {
	for {
		if err := waitReadable(ctx, m.efd); err != nil {
			return fmt.Errorf("sysfs: waiting for MSI: %w", err)
		}
		var b [8]byte
		k, err := unix.Read(m.efd, b[:])
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || k != 8 {
			return fmt.Errorf("sysfs: reading the MSI eventfd: %d bytes, %v", k, err)
		}
		m.n += binary.NativeEndian.Uint64(b[:])
		return nil
	}
}

// count also takes the messages that arrived since the last wait (those
// that signalled causes the driver polled for), so it is every MSI the
// device sent since MSI was enabled.
func (m *msiIRQ) count() uint64 {
	var b [8]byte
	if k, err := unix.Read(m.efd, b[:]); err == nil && k == 8 {
		m.n += binary.NativeEndian.Uint64(b[:])
	}
	return m.n
}

// close routes MSI away from the eventfd (which disables MSI on the device)
// and closes it.
func (m *msiIRQ) close() error {
	err := vfioDisableIRQ(m.v.device, vfioabi.PCIMSIIRQIndex)
	unix.Close(m.efd)
	return err
}
