package qemu

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"time"
)

// The front end's restore as I/O port accesses (the legacy configuration
// mechanism, frontend.go), issued as HMP commands in batches: through the
// readline HMP monitor (hmpmon.go) a batch's lines go at once, through
// the main QMP monitor each access is a round trip of its own.

// portAccess is one I/O port access, an HMP "i" or "o" command.
type portAccess struct {
	read  bool
	size  string // b, h or w: 8, 16 or 32 bits
	port  uint32
	value uint32 // what a write writes
	what  string // the step it is part of, for errors
}

// hmp is the access's HMP command line ("o /w 0xcf8 0x80001010"). It
// always names the size: without one HMP uses the last size its monitor
// was given, whatever the command (TestHMPMonitorRealQEMU).
func (a portAccess) hmp() string {
	if a.read {
		return fmt.Sprintf("i /%s %#x", a.size, a.port)
	}
	return fmt.Sprintf("o /%s %#x %#x", a.size, a.port, a.value)
}

// portRE matches HMP's answer to "i": "portl[0x0cf8] = 0x80001004".
var portRE = regexp.MustCompile(`=\s*0x([0-9a-fA-F]+)`)

// result checks HMP's output for the access and returns what a read read.
func (a portAccess) result(out string) (uint32, error) {
	if !a.read {
		if out != "" { // "o" prints nothing unless it failed
			return 0, fmt.Errorf("qemu: %s: HMP %q answered %q", a.what, a.hmp(), out)
		}
		return 0, nil
	}
	m := portRE.FindStringSubmatch(out)
	if m == nil {
		return 0, fmt.Errorf("qemu: %s: unexpected answer to %q: %q", a.what, a.hmp(), out)
	}
	v, err := strconv.ParseUint(m[1], 16, 32)
	if err != nil {
		return 0, fmt.Errorf("qemu: %s: answer to %q: %w", a.what, a.hmp(), err)
	}
	return uint32(v), nil
}

// portPlan collects a batch of accesses, leaving out a write of
// CONFIG_ADDRESS that would repeat the last one it wrote.
type portPlan struct {
	addr uint32 // the last CONFIG_ADDRESS written (0: none)
	ops  []portAccess
}

func (p *portPlan) in(port uint32, what string) {
	p.ops = append(p.ops, portAccess{read: true, size: "w", port: port, what: what})
}

func (p *portPlan) out(size string, port, value uint32, what string) {
	p.ops = append(p.ops, portAccess{size: size, port: port, value: value, what: what})
}

func (p *portPlan) setAddress(a uint32, what string) {
	if a != p.addr {
		p.out("w", configAddressPort, a, what)
		p.addr = a
	}
}

// configWrite writes size bytes of value at config offset off of bdf.
func (p *portPlan) configWrite(bdf [3]int, off uint16, size uint8, value uint32, what string) error {
	if off >= 0x100 {
		return fmt.Errorf("offset beyond conventional config space")
	}
	letter := map[uint8]string{1: "b", 2: "h", 4: "w"}[size]
	if letter == "" || uint16(size) > 4-off%4 {
		return fmt.Errorf("size %d at offset %#x crosses a dword", size, off)
	}
	p.setAddress(configAddress(bdf, off), what)
	p.out(letter, configDataPort+uint32(off%4), value, what)
	return nil
}

// configRead reads the dword at config offset off of bdf.
func (p *portPlan) configRead(bdf [3]int, off uint16, what string) {
	p.setAddress(configAddress(bdf, off), what)
	p.in(configDataPort, what)
}

// take returns the accesses planned so far and starts the next batch.
func (p *portPlan) take() []portAccess {
	ops := p.ops
	p.ops = nil
	return ops
}

// portIO runs batches of accesses on one VM.
type portIO struct {
	vm  *VM
	hmp *hmpMonitor // nil: one access at a time on the main monitor
}

// run issues the accesses in order and returns the values of the reads
// among them, in order.
func (io portIO) run(ops []portAccess) ([]uint32, error) {
	outs := make([]string, len(ops))
	if io.hmp == nil {
		for i, a := range ops {
			out, err := io.vm.HMP(a.hmp())
			if err != nil {
				return nil, fmt.Errorf("qemu: %s: %w", a.what, err)
			}
			outs[i] = out
		}
	} else {
		lines := make([]string, len(ops))
		for i, a := range ops {
			lines[i] = a.hmp()
		}
		var err error
		if outs, err = io.hmp.run(lines); err != nil {
			return nil, fmt.Errorf("qemu: restoring the front end: %w", err)
		}
	}
	var read []uint32
	for i, a := range ops {
		v, err := a.result(outs[i])
		if err != nil {
			return nil, err
		}
		if a.read {
			read = append(read, v)
		}
	}
	return read, nil
}

// done ends the HMP monitor's use: it is closed after the restore, the
// one time a QEMU needs it.
func (io portIO) done() {
	if io.hmp != nil {
		_ = io.hmp.close()
	}
}

// frontEnd is what a VM keeps for its front end's restore.
type frontEnd struct {
	mu       sync.Mutex
	bdf      [3]int
	bdfKnown bool
	hmp      *hmpMonitor // connected by PrepareFrontEnd, taken by the restore
	serialOK sync.Once   // logs the fallback to the main monitor once
}

// hmpTimeout bounds the HMP monitor's banner and each batch: a batch of
// some twenty port accesses takes a few milliseconds.
const hmpTimeout = 5 * time.Second

// PrepareFrontEnd readies RestoreFrontEnd before a migration's downtime:
// it finds the vGPU's PCI address and connects the HMP monitor. Neither
// changes during the VM's life: the device set is fixed and a device on
// a root bus (the only place RestoreFrontEnd finds one) has a bus number
// no guest programs. A failure is not fatal (the restore then does the
// step itself, in the downtime) and is returned for the log.
func (vm *VM) PrepareFrontEnd() error {
	_, berr := vm.vgpuBDF()
	var cerr error
	vm.fe.mu.Lock()
	if vm.fe.hmp == nil {
		vm.fe.hmp, cerr = vm.dialHMP()
	}
	vm.fe.mu.Unlock()
	return errors.Join(berr, cerr)
}

// vgpuBDF is the vGPU's bus, device and function, found once.
func (vm *VM) vgpuBDF() ([3]int, error) {
	vm.fe.mu.Lock()
	bdf, ok := vm.fe.bdf, vm.fe.bdfKnown
	vm.fe.mu.Unlock()
	if ok {
		return bdf, nil
	}
	bdf, err := vm.deviceBDF(DeviceID)
	if err != nil {
		return bdf, err
	}
	vm.fe.mu.Lock()
	vm.fe.bdf, vm.fe.bdfKnown = bdf, true
	vm.fe.mu.Unlock()
	return bdf, nil
}

// errNoHMPSocket: the QEMU has no readline HMP monitor (adopted, or
// started by a gmigd before it had one).
var errNoHMPSocket = errors.New("qemu: no HMP monitor socket")

// dialHMP connects to the VM's readline HMP monitor.
func (vm *VM) dialHMP() (*hmpMonitor, error) {
	if vm.cfg.RunDir == "" {
		return nil, errNoHMPSocket
	}
	path := filepath.Join(vm.cfg.RunDir, HMPSocket)
	if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("%w: %w", errNoHMPSocket, err)
	}
	return dialHMPMonitor(path, hmpTimeout)
}

// frontEndIO takes the HMP monitor for a restore, connecting it if
// PrepareFrontEnd did not; without one the restore goes through the main
// monitor, which is logged once.
func (vm *VM) frontEndIO() portIO {
	vm.fe.mu.Lock()
	defer vm.fe.mu.Unlock()
	h := vm.fe.hmp
	vm.fe.hmp = nil
	if h == nil {
		var err error
		if h, err = vm.dialHMP(); err != nil {
			vm.fe.serialOK.Do(func() {
				vm.cfg.Log.Warn().Err(err).Int("pid", vm.pid).
					Msg("restoring the vGPU's front end through the main QMP monitor, one round trip per port access")
			})
			return portIO{vm: vm}
		}
	}
	return portIO{vm: vm, hmp: h}
}

// closeHMP closes the HMP monitor if it is connected.
func (vm *VM) closeHMP() {
	vm.fe.mu.Lock()
	h := vm.fe.hmp
	vm.fe.hmp = nil
	vm.fe.mu.Unlock()
	if h != nil {
		_ = h.close()
	}
}
