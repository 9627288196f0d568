package sysfs

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gmig-dev/gmig/internal/sysfs/vfioabi"
)

func TestParseIOMMUGroup(t *testing.T) {
	for link, want := range map[string]int{
		"../../../kernel/iommu_groups/1":    1,
		"/sys/kernel/iommu_groups/17":       17,
		"../../../../kernel/iommu_groups/0": 0,
	} {
		if n, err := parseIOMMUGroup(link); err != nil || n != want {
			t.Errorf("parseIOMMUGroup(%q) = %d, %v; want %d", link, n, err, want)
		}
	}
	for _, bad := range []string{"", "../../../kernel/iommu_groups/x", "../../../kernel/iommu_groups/-1", "../../devices/3", "3"} {
		if n, err := parseIOMMUGroup(bad); err == nil {
			t.Errorf("parseIOMMUGroup(%q) = %d, want an error", bad, n)
		}
	}
}

func TestGroupDevice(t *testing.T) {
	dev := t.TempDir()
	if p, noiommu := groupDevice(dev, 3); p != filepath.Join(dev, "vfio/3") || noiommu {
		t.Errorf("groupDevice without a noiommu node = %q, %v", p, noiommu)
	}
	mkfile(t, filepath.Join(dev, "vfio/noiommu-3"), "")
	if p, noiommu := groupDevice(dev, 3); p != filepath.Join(dev, "vfio/noiommu-3") || !noiommu {
		t.Errorf("groupDevice with a noiommu node = %q, %v", p, noiommu)
	}
}

func TestIRQMode(t *testing.T) {
	for _, m := range []IRQMode{IRQNone, IRQINTx, IRQMSI} {
		got, err := ParseIRQMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseIRQMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	if _, err := ParseIRQMode("msix"); err == nil {
		t.Error("ParseIRQMode(msix) succeeded")
	}
}

// TestIRQSetEncoding checks the SET_IRQS buffer: struct vfio_irq_set, then
// one int32 eventfd per vector, argsz counting both.
func TestIRQSetEncoding(t *testing.T) {
	b := irqSet(vfioabi.IRQSetDataEventfd|vfioabi.IRQSetActionTrig, vfioabi.PCIMSIIRQIndex, 0, 1, []byte{7, 0, 0, 0})
	want := []uint32{24, 0x24, 1, 0, 1, 7}
	if len(b) != 24 {
		t.Fatalf("%d bytes, want 24", len(b))
	}
	for i, w := range want {
		if got := binary.NativeEndian.Uint32(b[4*i:]); got != w {
			t.Errorf("word %d = %#x, want %#x", i, got, w)
		}
	}
	if b := irqSet(vfioabi.IRQSetDataNone|vfioabi.IRQSetActionTrig, 1, 0, 0, nil); len(b) != 20 || binary.NativeEndian.Uint32(b) != 20 {
		t.Errorf("disable: % x", b)
	}
}

// fakeSys is a sysfs tree with one PCI device, enough for bindDriver: the
// kernel's side (binding on drivers_probe) is played by probe.
type fakeSys struct {
	root, dev string
}

func newFakeSys(t *testing.T) fakeSys {
	root := t.TempDir()
	f := fakeSys{root: root, dev: filepath.Join(root, "bus/pci/devices/0000:00:03.0")}
	mkfile(t, filepath.Join(f.dev, "driver_override"), "(null)\n")
	mkfile(t, filepath.Join(root, "bus/pci/drivers_probe"), "")
	mkfile(t, filepath.Join(root, "bus/pci/drivers/vfio-pci/bind"), "")
	return f
}

// bind plays the kernel binding the device to driver.
func (f fakeSys) bind(t *testing.T, driver string) {
	if err := os.Symlink(filepath.Join(f.root, "bus/pci/drivers", driver), filepath.Join(f.dev, "driver")); err != nil {
		t.Fatal(err)
	}
}

func TestBindDriverAlreadyBound(t *testing.T) {
	f := newFakeSys(t)
	f.bind(t, "vfio-pci")
	if err := bindDriver(f.dev, f.root, "vfio-pci"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(f.root, "bus/pci/drivers_probe")); len(b) != 0 {
		t.Errorf("probed a device already bound: %q", b)
	}
}

// TestBindDriverRefused: a vfio-pci that does not bind leaves the device
// unbound; the error says why, from what sysfs shows.
func TestBindDriverRefused(t *testing.T) {
	for name, c := range map[string]struct {
		param string // enable_unsafe_noiommu_mode's contents; "" for none
		group bool
		want  string
	}{
		"no noiommu in the kernel": {"", false, "built without CONFIG_VFIO_NOIOMMU"},
		"noiommu off":              {"N\n", false, "no-IOMMU mode is off"},
		"noiommu on":               {"Y\n", false, "no-IOMMU mode is on; see the kernel log"},
		"has a group":              {"", true, "see the kernel log"},
	} {
		t.Run(name, func(t *testing.T) {
			f := newFakeSys(t)
			if c.param != "" {
				mkfile(t, filepath.Join(f.root, "module/vfio/parameters/enable_unsafe_noiommu_mode"), c.param)
			}
			if c.group {
				mkfile(t, filepath.Join(f.root, "kernel/iommu_groups/4/type"), "DMA\n")
				if err := os.Symlink(filepath.Join(f.root, "kernel/iommu_groups/4"), filepath.Join(f.dev, "iommu_group")); err != nil {
					t.Fatal(err)
				}
			}
			err := bindDriver(f.dev, f.root, "vfio-pci")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("bindDriver = %v, want an error saying %q", err, c.want)
			}
			if errors.Is(err, ErrNoIOMMUGroup) == c.group {
				t.Errorf("bindDriver = %v: ErrNoIOMMUGroup %v, want %v", err, !c.group, c.group)
			}
			if b, _ := os.ReadFile(filepath.Join(f.dev, "driver_override")); string(b) != "vfio-pci" {
				t.Errorf("driver_override = %q", b)
			}
			if b, _ := os.ReadFile(filepath.Join(f.root, "bus/pci/drivers_probe")); string(b) != "0000:00:03.0" {
				t.Errorf("drivers_probe got %q", b)
			}
		})
	}
}

func TestBindDriverNotLoaded(t *testing.T) {
	f := newFakeSys(t)
	if err := bindDriver(f.dev, f.root, "uio_pci_generic"); err == nil || !strings.Contains(err.Error(), "not loaded") {
		t.Errorf("bindDriver = %v, want not loaded", err)
	}
}

func TestReleaseDriver(t *testing.T) {
	f := newFakeSys(t)
	mkfile(t, filepath.Join(f.dev, "driver_override"), "vfio-pci\n")
	mkfile(t, filepath.Join(f.root, "bus/pci/drivers/vfio-pci/unbind"), "")
	f.bind(t, "vfio-pci")
	if err := releaseDriver(f.dev, "vfio-pci"); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(f.root, "bus/pci/drivers/vfio-pci/unbind")); string(b) != "0000:00:03.0" {
		t.Errorf("unbind got %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(f.dev, "driver_override")); string(b) != "\n" {
		t.Errorf("driver_override = %q, want cleared", b)
	}
}

func mkfile(t *testing.T, path, contents string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(contents), 0o644); err != nil {
		t.Fatal(err)
	}
}
