package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

	"github.com/digitalocean/go-qemu/qmp"
	"golang.org/x/sys/unix"
)

// Adopting a VM started by someone else (libvirt, a script): gmigd connects
// to its QMP socket, learns QEMU's process from the socket's peer
// credentials and its command line from /proc, and checks that the VM is
// one a vGPU can migrate with. The command line, less what each host sets,
// becomes the VM's Spec.Argv: a migration's destination starts its QEMU
// with it (so the paths it names — kernel, disks — must exist there too).

// ErrAdopt reports a VM that cannot be adopted.
var ErrAdopt = errors.New("qemu: cannot adopt the VM")

// Adopt connects to the QMP socket at path of a running QEMU whose vGPU is
// the vfio-user-pci device with id deviceID.
func Adopt(ctx context.Context, path, deviceID string) (*VM, error) {
	pid, err := peerPID(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAdopt, err)
	}
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return nil, fmt.Errorf("%w: reading QEMU's command line: %w", ErrAdopt, err)
	}
	argv := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	spec, err := AdoptedSpec(argv, deviceID)
	if err != nil {
		return nil, err
	}
	vm := &VM{cfg: Config{Spec: spec}, pid: pid, events: newEvents(), done: make(chan struct{})}
	mon, err := qmp.NewSocketMonitor("unix", path, 5*time.Second)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrAdopt, err)
	}
	if err := mon.Connect(); err != nil {
		return nil, fmt.Errorf("%w: QMP handshake: %w", ErrAdopt, err)
	}
	vm.qmpMu.Lock()
	vm.qmp = mon
	vm.qmpMu.Unlock()
	ch, _ := mon.Events(ctx)
	go func() {
		vm.events.pump(ch)
		close(vm.done) // the monitor connection ended: QEMU is gone for us
	}()
	return vm, nil
}

// AdoptedSpec turns an adopted QEMU's command line (argv[0] first) into a
// Spec: the VM must use a shared memfd for guest RAM, a pc or q35 machine,
// and have the vGPU as vfio-user-pci device deviceID. What each host sets
// is dropped: the program, the vGPU device, QMP and monitor sockets,
// -incoming, -S, -daemonize, -pidfile and libvirt's master key (below).
func AdoptedSpec(argv []string, deviceID string) (Spec, error) {
	if len(argv) < 2 {
		return Spec{}, fmt.Errorf("%w: empty command line", ErrAdopt)
	}
	var keep []string
	sawDevice := false
	args := argv[1:]
	monitors := monitorChardevs(args)
	for i := 0; i < len(args); i++ {
		a := args[i]
		opt := strings.TrimPrefix(a, "-")
		opt = strings.TrimPrefix(opt, "-")
		takesValue := i+1 < len(args)
		switch opt {
		case "S", "daemonize":
			continue
		case "incoming", "pidfile", "qmp", "qmp-pretty", "monitor", "mon":
			i++
			continue
		case "chardev":
			if takesValue && monitors[optionID(args[i+1])] {
				i++
				continue
			}
		case "object":
			if takesValue && (isLibvirtMasterKey(args[i+1]) || monitorObjectChardev(args[i+1]) != "") {
				i++
				continue
			}
		case "device":
			if takesValue && isVGPUDevice(args[i+1], deviceID) {
				sawDevice = true
				i++
				continue
			}
		}
		keep = append(keep, a)
	}
	for i := 0; i < len(keep); i++ {
		if o := strings.TrimLeft(keep[i], "-"); o == "add-fd" || (i+1 < len(keep) && strings.Contains(","+keep[i+1], ",fd=")) {
			return Spec{}, fmt.Errorf("%w: %q passes a file descriptor, which a migration's destination cannot be given", ErrAdopt, keep[i]+" "+keep[min(i+1, len(keep)-1)])
		}
	}
	if !sawDevice {
		return Spec{}, fmt.Errorf("%w: no vfio-user-pci device with id %q on its command line", ErrAdopt, deviceID)
	}
	if err := checkMemoryArgs(keep); err != nil {
		return Spec{}, fmt.Errorf("%w: %w", ErrAdopt, err)
	}
	if !hasSharedMemfd(keep) {
		return Spec{}, fmt.Errorf("%w: %w (guest RAM is not one)", ErrAdopt, ErrSharedMemory)
	}
	if _, err := ChipsetOf(machineOfArgv(keep)); err != nil {
		return Spec{}, fmt.Errorf("%w: %w", ErrAdopt, err)
	}
	return Spec{Argv: keep}, nil
}

// libvirtMasterKey is the id of the secret object libvirt gives every QEMU
// it starts, read from a file in that start's own state directory
// (libvirt's src/qemu/qemu_command.c, qemuBuildMasterKeyCommandLine): a
// per-host, per-start key a destination has no copy of.
const libvirtMasterKey = "masterKey0"

// isLibvirtMasterKey reports whether an -object value is libvirt's master
// key secret (JSON or key=value form).
func isLibvirtMasterKey(v string) bool {
	if strings.HasPrefix(strings.TrimSpace(v), "{") {
		var o struct {
			Type string `json:"qom-type"`
			ID   string `json:"id"`
		}
		return json.Unmarshal([]byte(v), &o) == nil && o.Type == "secret" && o.ID == libvirtMasterKey
	}
	return strings.HasPrefix(v, "secret,") && optionID(v) == libvirtMasterKey
}

// monitorChardevs returns the ids of the chardevs the VM's monitors use,
// each host's own: those of -mon options (libvirt 11.3) and of
// monitor-qmp objects (libvirt 12.9 gives its monitor as
// `-object {"qom-type":"monitor-qmp","id":"monitor","chardev":"charmonitor"}`
// over a chardev on a descriptor it passes, `fd=N`).
func monitorChardevs(args []string) map[string]bool {
	ids := map[string]bool{}
	for i := 0; i+1 < len(args); i++ {
		switch strings.TrimLeft(args[i], "-") {
		case "mon":
			for _, kv := range strings.Split(args[i+1], ",") {
				if c, ok := strings.CutPrefix(kv, "chardev="); ok {
					ids[c] = true
				}
			}
		case "object":
			if c := monitorObjectChardev(args[i+1]); c != "" {
				ids[c] = true
			}
		}
	}
	return ids
}

// monitorObjectChardev returns the chardev of an -object value that is a
// QMP monitor (qom-type monitor-qmp, JSON or key=value form), or "".
func monitorObjectChardev(v string) string {
	if strings.HasPrefix(strings.TrimSpace(v), "{") {
		var o struct {
			Type    string `json:"qom-type"`
			Chardev string `json:"chardev"`
		}
		if json.Unmarshal([]byte(v), &o) != nil || o.Type != "monitor-qmp" {
			return ""
		}
		return o.Chardev
	}
	if !strings.HasPrefix(v, "monitor-qmp,") {
		return ""
	}
	for _, kv := range strings.Split(v, ",") {
		if c, ok := strings.CutPrefix(kv, "chardev="); ok {
			return c
		}
	}
	return ""
}

// optionID returns the id= of a key=value option value.
func optionID(v string) string {
	for _, kv := range strings.Split(v, ",") {
		if id, ok := strings.CutPrefix(kv, "id="); ok {
			return id
		}
	}
	return ""
}

// isVGPUDevice reports whether a -device value is the vfio-user-pci device
// with id (JSON or key=value form).
func isVGPUDevice(v, id string) bool {
	if !strings.Contains(v, "vfio-user-pci") {
		return false
	}
	return strings.Contains(v, `"id":"`+id+`"`) || strings.Contains(v, `"id": "`+id+`"`) ||
		strings.Contains(","+v+",", ",id="+id+",")
}

// hasSharedMemfd reports whether the command line gives guest RAM a shared
// memfd backend.
func hasSharedMemfd(args []string) bool {
	for _, a := range args {
		if isSharedMemfd(a) {
			return true
		}
	}
	return false
}

// machineOfArgv returns the machine type of a command line ("" if none:
// QEMU's default for x86_64 is pc).
func machineOfArgv(args []string) string {
	for i := 0; i+1 < len(args); i++ {
		if a := strings.TrimLeft(args[i], "-"); a == "machine" || a == "M" {
			for _, kv := range strings.Split(args[i+1], ",") {
				if t, ok := strings.CutPrefix(kv, "type="); ok {
					return t
				}
				if !strings.Contains(kv, "=") {
					return kv
				}
			}
		}
	}
	return ""
}

// peerPID returns the process id at the other end of the UNIX socket at
// path (SO_PEERCRED of a fresh connection).
func peerPID(path string) (int, error) {
	c, err := net.DialTimeout("unix", path, 5*time.Second)
	if err != nil {
		return 0, fmt.Errorf("connecting to %s: %w", path, err)
	}
	defer c.Close()
	raw, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		return 0, err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, err
	}
	if cerr != nil {
		return 0, fmt.Errorf("peer credentials of %s: %w", path, cerr)
	}
	if cred.Pid <= 0 {
		return 0, fmt.Errorf("no peer process on %s", path)
	}
	return int(cred.Pid), nil
}
