package main

import (
	"reflect"
	"testing"

	"github.com/gmig-dev/gmig/internal/sysfs"
)

func TestIRQFlag(t *testing.T) {
	for _, c := range []struct {
		args []string
		want sysfs.IRQMode
	}{
		{nil, sysfs.IRQINTx}, // the default
		{[]string{"-irq=msi"}, sysfs.IRQMSI},
		{[]string{"-irq=intx"}, sysfs.IRQINTx},
		{[]string{"-irq=none"}, sysfs.IRQNone},
		// The boolean -irq of before.
		{[]string{"-irq"}, sysfs.IRQINTx},
		{[]string{"-irq=true"}, sysfs.IRQINTx},
		{[]string{"-irq=false"}, sysfs.IRQNone},
		{[]string{"-irq=false", "-irq=msi"}, sysfs.IRQMSI},
	} {
		o, err := parseFlags(c.args)
		if err != nil || o.irq != c.want {
			t.Errorf("parseFlags(%q): irq %v, %v; want %v", c.args, o.irq, err, c.want)
		}
	}
	for _, bad := range [][]string{{"-irq=msix"}, {"-irq", "msi"}} {
		if _, err := parseFlags(bad); err == nil {
			t.Errorf("parseFlags(%q) succeeded", bad)
		}
	}
}

func TestIRQModules(t *testing.T) {
	with := func(string) bool { return true }
	without := func(string) bool { return false }
	for _, c := range []struct {
		mode   sysfs.IRQMode
		have   func(string) bool
		want   []string
		params map[string]string
	}{
		{sysfs.IRQNone, with, nil, nil},
		{sysfs.IRQINTx, with, []string{"uio_pci_generic"}, nil},
		{sysfs.IRQMSI, with, []string{"virtio-iommu", "vfio", "vfio_iommu_type1", "vfio-pci"},
			map[string]string{"vfio": "enable_unsafe_noiommu_mode=1", "vfio_iommu_type1": "allow_unsafe_interrupts=1"}},
		{sysfs.IRQMSI, without, []string{"vfio", "vfio_iommu_type1", "vfio-pci"},
			map[string]string{"vfio": "enable_unsafe_noiommu_mode=1", "vfio_iommu_type1": "allow_unsafe_interrupts=1"}},
	} {
		want, params := irqModules(c.mode, c.have)
		if !reflect.DeepEqual(want, c.want) || !reflect.DeepEqual(params, c.params) {
			t.Errorf("irqModules(%v) = %v %v, want %v %v", c.mode, want, params, c.want, c.params)
		}
	}
}

func TestProcInterrupts(t *testing.T) {
	const text = `           CPU0       CPU1       
  0:         44          0   IO-APIC   2-edge      timer
 11:          3         12   IO-APIC  11-fasteoi   uio_pci_generic
 24:          0         65   PCI-MSI-0000:00:02.0   0-edge      vfio-msi[0](0000:00:02.0)
NMI:          0          0   Non-maskable interrupts
`
	for _, c := range []struct {
		name string
		n    uint64
		line string
	}{
		{"vfio-msi", 65, "24: 0 65 PCI-MSI-0000:00:02.0 0-edge vfio-msi[0](0000:00:02.0)"},
		{"uio_pci_generic", 15, "11: 3 12 IO-APIC 11-fasteoi uio_pci_generic"},
		{"virtio", 0, ""},
	} {
		n, line := procInterrupts(text, c.name)
		if n != c.n || line != c.line {
			t.Errorf("procInterrupts(%s) = %d %q, want %d %q", c.name, n, line, c.n, c.line)
		}
	}
}
