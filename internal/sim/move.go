package sim

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Move re-attaches the paused VM to the vGPU at socket, keeping guest RAM,
// and rebinds the driver: what a migration's destination QEMU and the
// migrated guest see.
func (vm *VM) Move(socket string) error {
	_, rebind, err := vm.MoveTo(socket, vm.opts)
	if err != nil {
		return err
	}
	return rebind()
}

// MoveTo re-attaches the paused VM to the vGPU at socket with opts,
// keeping guest RAM, as a migration's destination QEMU plugs the device
// in; rebind rebinds the driver once that vGPU holds the migrated state
// (Move does both).
func (vm *VM) MoveTo(socket string, opts Options) (bus *Bus, rebind func() error, err error) {
	vm.busMu.Lock()
	defer vm.busMu.Unlock()
	fd, err := unix.Dup(int(vm.bus.RAMFile().Fd()))
	if err != nil {
		return nil, nil, fmt.Errorf("sim: keeping guest RAM: %w", err)
	}
	ram := os.NewFile(uintptr(fd), "guest-ram")
	defer ram.Close()
	opts.RAM, opts.RAMSize = ram, 0
	if bus, err = Attach(socket, opts); err != nil {
		return nil, nil, err
	}
	// The old attachment goes after the new one runs, off the resume's
	// path: a destination QEMU never tears down the source's mappings
	// (unmapping a large aperture takes a while).
	old := vm.bus
	vm.bus = bus
	go old.Close()
	return bus, func() error { return vm.d.Rebind(bus) }, nil
}

// Bus is the VM's attachment to its vGPU now (MoveTo changes it).
func (vm *VM) Bus() *Bus {
	vm.busMu.RLock()
	defer vm.busMu.RUnlock()
	return vm.bus
}
