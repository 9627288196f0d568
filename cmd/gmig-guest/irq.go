package main

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/internal/sysfs"
)

// irqFlag is -irq: intx, msi or none. It was once a boolean, so a bare
// -irq and -irq=true mean intx and -irq=false means none.
type irqFlag sysfs.IRQMode

func (f *irqFlag) String() string { return sysfs.IRQMode(*f).String() }

func (f *irqFlag) Set(s string) error {
	switch s {
	case "true":
		*f = irqFlag(sysfs.IRQINTx)
		return nil
	case "false":
		*f = irqFlag(sysfs.IRQNone)
		return nil
	}
	m, err := sysfs.ParseIRQMode(s)
	if err != nil {
		return err
	}
	*f = irqFlag(m)
	return nil
}

func (f *irqFlag) IsBoolFlag() bool { return true }

// irqModules returns the modules an interrupt mode loads (dependencies
// follow from modules.dep) and their parameters.
//
// MSI needs vfio-pci and a VFIO IOMMU model: vfio's no-IOMMU mode where the
// kernel has it (enable_unsafe_noiommu_mode=1; a kernel without it ignores
// the parameter), else a (virtual) IOMMU that puts the device in a group:
// virtio-iommu, loaded when the image carries it, and vfio_iommu_type1,
// which without interrupt remapping refuses a group unless
// allow_unsafe_interrupts=1.
func irqModules(mode sysfs.IRQMode, have func(string) bool) ([]string, map[string]string) {
	switch mode {
	case sysfs.IRQINTx:
		return []string{"uio_pci_generic"}, nil
	case sysfs.IRQMSI:
		var want []string
		if have("virtio-iommu") {
			want = append(want, "virtio-iommu")
		}
		want = append(want, "vfio", "vfio_iommu_type1", "vfio-pci")
		return want, map[string]string{
			"vfio":             "enable_unsafe_noiommu_mode=1",
			"vfio_iommu_type1": "allow_unsafe_interrupts=1",
		}
	}
	return nil, nil
}

// openBus loads the modules for o.irq and opens the vGPU with it, reporting
// the device and the interrupt mode in use ("interrupts MODE"). If the mode
// cannot be set up it says why and opens the device without interrupts, so
// the polling half still runs; ok is then false, except when the intx
// modules would not load, where the program has always just polled.
func openBus(o options) (bus *sysfs.Bus, ok bool) {
	mode := o.irq
	ok = true
	fail := func(err error) {
		report("interrupts %s: %v", mode, err)
		for _, l := range kernelLog("vfio", "iommu", "uio") {
			report("kernel: %s", l)
		}
		if mode == sysfs.IRQMSI {
			ok = false
		}
		mode = sysfs.IRQNone
	}
	if mode != sysfs.IRQNone {
		if err := loadIRQModules(o.modules, mode); err != nil {
			fail(err)
		}
	}
	bus, err := sysfs.Open(sysfs.Options{IRQ: mode})
	if err != nil && mode != sysfs.IRQNone {
		fail(err)
		ok = false
		bus, err = sysfs.Open(sysfs.Options{IRQ: sysfs.IRQNone})
	}
	if err != nil {
		report("device: %v", err)
		return nil, false
	}
	report("device %s", bus.Dir())
	if v, isVFIO := bus.VFIO(); isVFIO {
		report("vfio group %s iommu %s", v.Group, v.IOMMU)
	}
	report("interrupts %s", bus.IRQMode())
	return bus, ok
}

func loadIRQModules(dir string, mode sysfs.IRQMode) error {
	set, err := sysfs.OpenModuleSet(dir)
	if err != nil {
		return err
	}
	want, params := irqModules(mode, set.Has)
	loaded, err := set.Load(params, want...)
	report("modules %s", strings.Join(loaded, " "))
	if err != nil {
		return err
	}
	if mode == sysfs.IRQMSI {
		if _, err := os.Stat("/sys/module/vfio/parameters/enable_unsafe_noiommu_mode"); err != nil {
			report("vfio: no no-IOMMU mode in this kernel (built without CONFIG_VFIO_NOIOMMU): MSI needs an IOMMU, e.g. virtio-iommu")
		}
	}
	return nil
}

// reportIRQCounts reports the interrupts the program consumed and those the
// guest kernel counted for the device in /proc/interrupts.
func reportIRQCounts(bus *sysfs.Bus) {
	var name string
	switch bus.IRQMode() {
	case sysfs.IRQINTx:
		name = "uio_pci_generic"
	case sysfs.IRQMSI:
		name = "vfio-msi"
	default:
		return
	}
	b, err := os.ReadFile("/proc/interrupts")
	if err != nil {
		report("interrupts %s: program %d, kernel ? (%v)", bus.IRQMode(), bus.IRQCount(), err)
		return
	}
	n, line := procInterrupts(string(b), name)
	report("interrupts %s: program %d, kernel %d (%s)", bus.IRQMode(), bus.IRQCount(), n, line)
}

// procInterrupts sums the per-CPU counts of the /proc/interrupts lines that
// mention name, and returns the first such line with its spaces squeezed.
func procInterrupts(text, name string) (uint64, string) {
	var sum uint64
	var first string
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		if !strings.Contains(sc.Text(), name) {
			continue
		}
		f := strings.Fields(sc.Text())
		if len(f) == 0 || !strings.HasSuffix(f[0], ":") {
			continue
		}
		if first == "" {
			first = strings.Join(f, " ")
		}
		for _, c := range f[1:] {
			n, err := strconv.ParseUint(c, 10, 64)
			if err != nil {
				break
			}
			sum += n
		}
	}
	return sum, first
}

// kernelLog returns the kernel log's lines that mention any of words.
func kernelLog(words ...string) []string {
	size, err := unix.Klogctl(unix.SYSLOG_ACTION_SIZE_BUFFER, nil)
	if err != nil || size <= 0 {
		return []string{fmt.Sprintf("(kernel log: %v)", err)}
	}
	buf := make([]byte, size)
	n, err := unix.Klogctl(unix.SYSLOG_ACTION_READ_ALL, buf)
	if err != nil {
		return []string{fmt.Sprintf("(kernel log: %v)", err)}
	}
	var out []string
	for _, l := range strings.Split(string(buf[:n]), "\n") {
		for _, w := range words {
			if strings.Contains(l, w) {
				out = append(out, strings.TrimSpace(l))
				break
			}
		}
	}
	return out
}
