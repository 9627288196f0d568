package qemu

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"

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
func (vm *VM) RestoreFrontEnd(writes []apilog.Entry) error {
	chip, err := ChipsetOf(vm.machine())
	if err != nil {
		return err
	}
	bdf, err := vm.deviceBDF(DeviceID)
	if err != nil {
		return err
	}
	saved, err := vm.inPort("w", configAddressPort) // the guest may be mid-access
	if err != nil {
		return err
	}
	p := portWriter{vm: vm}
	msi := false
	for _, w := range writes {
		if w.Kind != apilog.ConfigWrite {
			continue
		}
		if err := p.configWrite(bdf, w.Offset, w.Size, w.Arg); err != nil {
			return fmt.Errorf("qemu: replaying config write %#x/%d: %w", w.Offset, w.Size, err)
		}
		if msiEnables(w) {
			msi = true
		}
	}
	// With MSI enabled QEMU has turned INTx off: nothing to re-route.
	if !msi {
		r := pirqRouters[chip]
		for _, reg := range r.regs {
			v, err := p.configRead(r.bdf, reg)
			if err != nil {
				return fmt.Errorf("qemu: reading the PIRQ routing at %#x: %w", reg, err)
			}
			if err := p.configWrite(r.bdf, reg, 4, v); err != nil {
				return fmt.Errorf("qemu: rewriting the PIRQ routing at %#x: %w", reg, err)
			}
		}
	}
	return vm.outPort("w", configAddressPort, saved)
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

// portWriter issues config accesses through HMP, skipping a write of
// CONFIG_ADDRESS that would repeat the last one (each HMP command is a
// monitor round trip: most of the front end's restore time).
type portWriter struct {
	vm   *VM
	addr uint32 // the last CONFIG_ADDRESS written (0: none)
}

func (p *portWriter) setAddress(a uint32) error {
	if a == p.addr {
		return nil
	}
	if err := p.vm.outPort("w", configAddressPort, a); err != nil {
		return err
	}
	p.addr = a
	return nil
}

// configWrite writes size bytes of value at config offset off of bdf.
func (p *portWriter) configWrite(bdf [3]int, off uint16, size uint8, value uint32) error {
	if off >= 0x100 {
		return fmt.Errorf("offset beyond conventional config space")
	}
	letter := map[uint8]string{1: "b", 2: "h", 4: "w"}[size]
	if letter == "" || uint16(size) > 4-off%4 {
		return fmt.Errorf("size %d at offset %#x crosses a dword", size, off)
	}
	if err := p.setAddress(configAddress(bdf, off)); err != nil {
		return err
	}
	return p.vm.outPort(letter, configDataPort+uint32(off%4), value)
}

// configRead reads the dword at config offset off of bdf.
func (p *portWriter) configRead(bdf [3]int, off uint16) (uint32, error) {
	if err := p.setAddress(configAddress(bdf, off)); err != nil {
		return 0, err
	}
	return p.vm.inPort("w", configDataPort)
}

func configAddress(bdf [3]int, off uint16) uint32 {
	return configEnable | uint32(bdf[0])<<16 | uint32(bdf[1])<<11 | uint32(bdf[2])<<8 | uint32(off&^3)
}

// outPort writes an I/O port through HMP ("o /w 0xcf8 0x80001010"; sizes
// b, h, w are 8, 16 and 32 bits; a byte write must say /b).
func (vm *VM) outPort(size string, port, value uint32) error {
	_, err := vm.HMP(fmt.Sprintf("o /%s %#x %#x", size, port, value))
	return err
}

// portRE matches HMP's answer to "i": "portl[0x0cf8] = 0x80001004".
var portRE = regexp.MustCompile(`=\s*0x([0-9a-fA-F]+)`)

// inPort reads an I/O port through HMP.
func (vm *VM) inPort(size string, port uint32) (uint32, error) {
	out, err := vm.HMP(fmt.Sprintf("i /%s %#x", size, port))
	if err != nil {
		return 0, err
	}
	m := portRE.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("qemu: unexpected answer to port read: %q", out)
	}
	v, err := strconv.ParseUint(m[1], 16, 32)
	return uint32(v), err
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
