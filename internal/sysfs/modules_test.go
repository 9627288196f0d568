package sysfs

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// rootDeps is what the provisioned Debian 6.12 root's modules.dep says about
// the modules the guest image carries.
const rootDeps = `kernel/drivers/uio/uio.ko.xz:
kernel/drivers/uio/uio_pci_generic.ko.xz: kernel/drivers/uio/uio.ko.xz
kernel/drivers/iommu/virtio-iommu.ko.xz:
kernel/drivers/vfio/vfio.ko.xz:
kernel/drivers/vfio/vfio_iommu_type1.ko.xz: kernel/drivers/vfio/vfio.ko.xz
kernel/drivers/vfio/pci/vfio-pci-core.ko.xz: kernel/drivers/vfio/vfio.ko.xz kernel/virt/lib/irqbypass.ko.xz
kernel/drivers/vfio/pci/vfio-pci.ko.xz: kernel/drivers/vfio/pci/vfio-pci-core.ko.xz kernel/drivers/vfio/vfio.ko.xz kernel/virt/lib/irqbypass.ko.xz
kernel/virt/lib/irqbypass.ko.xz:
`

func TestModuleName(t *testing.T) {
	for in, want := range map[string]string{
		"kernel/drivers/vfio/pci/vfio-pci.ko.xz": "vfio-pci",
		"uio.ko":                                 "uio",
		"vfio_iommu_type1.ko.zst":                "vfio_iommu_type1",
	} {
		if got := ModuleName(in); got != want {
			t.Errorf("ModuleName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestLoadOrder(t *testing.T) {
	deps, err := ParseModuleDeps(strings.NewReader(rootDeps))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ want, order []string }{
		{[]string{"uio_pci_generic"}, []string{"uio", "uio_pci_generic"}},
		// What the guest loads for MSI.
		{[]string{"virtio-iommu", "vfio", "vfio_iommu_type1", "vfio-pci"},
			[]string{"virtio-iommu", "vfio", "vfio_iommu_type1", "irqbypass", "vfio-pci-core", "vfio-pci"}},
		{[]string{"vfio-pci", "vfio"}, []string{"vfio", "irqbypass", "vfio-pci-core", "vfio-pci"}},
	} {
		order, err := deps.LoadOrder(c.want...)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(order, c.order) {
			t.Errorf("LoadOrder(%v) = %v, want %v", c.want, order, c.order)
		}
		at := map[string]int{}
		for i, m := range order {
			at[m] = i
		}
		for _, m := range order {
			for _, d := range deps[m] {
				if at[d] > at[m] {
					t.Errorf("%v: %s loads before its dependency %s", order, m, d)
				}
			}
		}
	}
}

func TestLoadOrderErrors(t *testing.T) {
	for name, c := range map[string]struct{ deps, want string }{
		"missing":    {"a.ko: b.ko\n", "a"},
		"cycle":      {"a.ko: b.ko\nb.ko: a.ko\n", "a"},
		"self cycle": {"a.ko: a.ko\n", "a"},
		"unknown":    {"a.ko:\n", "z"},
	} {
		deps, err := ParseModuleDeps(strings.NewReader(c.deps))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := deps.LoadOrder(c.want); !errors.Is(err, ErrModuleDeps) {
			t.Errorf("%s: LoadOrder = %v, want ErrModuleDeps", name, err)
		}
	}
	for _, bad := range []string{"no colon\n", ": dep\n", "a.ko:\na.ko:\n"} {
		if _, err := ParseModuleDeps(strings.NewReader(bad)); !errors.Is(err, ErrModuleDeps) {
			t.Errorf("ParseModuleDeps(%q) = %v, want ErrModuleDeps", bad, err)
		}
	}
}

func TestModuleSet(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "modules.dep"), []byte(rootDeps), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"uio.ko.xz", "uio_pci_generic.ko.xz", "vfio.ko.xz", "vfio-pci-core.ko.xz", "vfio-pci.ko.xz"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := OpenModuleSet(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Has("uio_pci_generic") {
		t.Error("Has(uio_pci_generic) = false")
	}
	if s.Has("vfio-pci") {
		t.Error("Has(vfio-pci) = true without irqbypass's file")
	}
	if s.Has("virtio-iommu") {
		t.Error("Has(virtio-iommu) = true without its file")
	}
}
