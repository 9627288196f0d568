package qemu

import (
	"encoding/json"
	"fmt"

	"github.com/gmig-dev/gmig/internal/apilog"
	"github.com/gmig-dev/gmig/internal/pci"
)

// Restoring the vGPU's PCI front end on a migration's destination.
//
// QEMU 11.1's vfio-user client does not migrate the device's PCI config:
// after the load its BARs are unassigned and the guest loses the device.
// gmigd replays the guest's own config writes (recorded by the source
// vGPU, docs/migration-stream.md §11) into QEMU's emulated config through
// the human monitor, with the legacy configuration mechanism (PCI Local Bus
// 3.0 §3.2.2.3.2: the address at port 0xCF8, the data at 0xCFC-0xCFF),
// while the VM is paused. The log's order puts the command register last,
// so the BARs are in place before decoding is enabled.
//
// INTx is then re-routed: the front end's interrupt was wired to the pin
// the chipset routed at its creation, before the guest programmed the
// routing. Writing the chipset's PIRQ route control registers with their
// own values makes QEMU re-evaluate the routing and re-send the interrupt
// setup to the device (SET_IRQS). MSI needs nothing more: replaying the
// MSI enable makes QEMU set up the MSI eventfd.

// Ports and addresses of the legacy PCI configuration mechanism.
const (
	configAddressPort = 0xcf8
	configDataPort    = 0xcfc
	configEnable      = 0x80000000 // bit 31 of CONFIG_ADDRESS
)

// PIRQ route control registers (the interrupt router's config space).
var pirqRouters = map[Chipset]struct {
	bdf  [3]int   // bus, device, function of the router
	regs []uint16 // dword offsets of its PIRQ route control registers
}{
	// PIIX3 (82371SB datasheet §2.2: PIRQRC[A:D] at 60-63h), function 1.0.
	PIIX3: {bdf: [3]int{0, 1, 0}, regs: []uint16{0x60}},
	// ICH9 LPC (ICH9 datasheet §13.1: PIRQ[A-D]_ROUT 60-63h, PIRQ[E-H]_ROUT
	// 68-6Bh), device 31 function 0.
	ICH9: {bdf: [3]int{0, 31, 0}, regs: []uint16{0x60, 0x68}},
}

// RestoreFrontEnd replays writes (the vGPU's config writes in replay
// order) into the front end of the device with id DeviceID, then re-routes
// INTx through the machine's chipset. The VM must be paused.
//
// It runs in the migration's downtime, so what PrepareFrontEnd can do
// is done before: the device's address is known and the readline HMP
// monitor connected. The port accesses go to that monitor as two batches
// of short lines (the second needs the values the first read: the saved
// CONFIG_ADDRESS and the PIRQ routing); QEMU reads monitor input a byte at
// a time, so the short lines are what saves time. Without the HMP monitor
// (a QEMU started without it) each access is a QMP round trip of its own
// on the main monitor.
func (vm *VM) RestoreFrontEnd(writes []apilog.Entry) error {
	io := vm.frontEndIO()
	defer io.done()
	return vm.restoreFrontEnd(writes, io)
}

// restoreFrontEnd is RestoreFrontEnd through io.
func (vm *VM) restoreFrontEnd(writes []apilog.Entry, io portIO) error {
	chip, err := ChipsetOf(vm.machine())
	if err != nil {
		return err
	}
	bdf, err := vm.vgpuBDF()
	if err != nil {
		return err
	}
	var p portPlan
	p.in(configAddressPort, "saving CONFIG_ADDRESS") // the guest may be mid-access
	msi := false
	for _, w := range writes {
		if w.Kind != apilog.ConfigWrite {
			continue
		}
		what := fmt.Sprintf("replaying config write %#x/%d", w.Offset, w.Size)
		if err := p.configWrite(bdf, w.Offset, w.Size, w.Arg, what); err != nil {
			return fmt.Errorf("qemu: %s: %w", what, err)
		}
		if msiEnables(w) {
			msi = true
		}
	}
	// With MSI enabled QEMU has turned INTx off: nothing to re-route.
	r := pirqRouters[chip]
	if msi {
		r.regs = nil
	}
	for _, reg := range r.regs {
		p.configRead(r.bdf, reg, fmt.Sprintf("reading the PIRQ routing at %#x", reg))
	}
	read, err := io.run(p.take())
	if err != nil {
		return err
	}
	saved, routes := read[0], read[1:]
	for i, reg := range r.regs {
		if err := p.configWrite(r.bdf, reg, 4, routes[i], fmt.Sprintf("rewriting the PIRQ routing at %#x", reg)); err != nil {
			return err
		}
	}
	p.out("w", configAddressPort, saved, "restoring CONFIG_ADDRESS")
	_, err = io.run(p.take())
	return err
}

// msiEnables reports whether a config write sets the MSI enable bit (the
// vGPU's MSI capability, docs/device-abi.md §2).
func msiEnables(w apilog.Entry) bool {
	const ctl = pci.OffMSIControl
	if w.Offset > ctl || uint32(w.Offset)+uint32(w.Size) <= ctl {
		return false
	}
	return (w.Arg>>(8*(ctl-w.Offset)))&pci.MSIControlEnable != 0
}

func configAddress(bdf [3]int, off uint16) uint32 {
	return configEnable | uint32(bdf[0])<<16 | uint32(bdf[1])<<11 | uint32(bdf[2])<<8 | uint32(off&^3)
}

// deviceBDF finds the bus, device and function of the device with qdev id.
func (vm *VM) deviceBDF(id string) ([3]int, error) {
	raw, err := vm.QMP("query-pci", nil)
	if err != nil {
		return [3]int{}, err
	}
	var buses []struct {
		Bus     int `json:"bus"`
		Devices []struct {
			Bus      int    `json:"bus"`
			Slot     int    `json:"slot"`
			Function int    `json:"function"`
			QdevID   string `json:"qdev_id"`
		} `json:"devices"`
	}
	if err := json.Unmarshal(raw, &buses); err != nil {
		return [3]int{}, fmt.Errorf("qemu: query-pci: %w", err)
	}
	for _, b := range buses {
		for _, d := range b.Devices {
			if d.QdevID == id {
				return [3]int{d.Bus, d.Slot, d.Function}, nil
			}
		}
	}
	return [3]int{}, fmt.Errorf("qemu: no PCI device %q", id)
}

// machine is the VM's machine type as configured.
func (vm *VM) machine() string {
	if len(vm.cfg.Argv) > 0 {
		return machineOfArgv(vm.cfg.Argv)
	}
	return vm.cfg.Machine
}
