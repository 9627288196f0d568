// Package qemu starts and controls QEMU for gmig: a QEMU 11.1 installed in a
// Debian trixie root (see scripts/provision.sh), run on the host through the
// root's own dynamic loader so no chroot or mounts are needed, with a
// vfio-user vGPU, guest RAM as a shared memfd, and QMP
// (digitalocean/go-qemu) for control.
package qemu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/digitalocean/go-qemu/qmp"
	"github.com/rs/zerolog"
)

// Errors callers branch on.
var (
	ErrNoRoot       = errors.New("qemu: QEMU root not provisioned")
	ErrNoKVM        = errors.New("qemu: /dev/kvm not usable")
	ErrSharedMemory = errors.New("qemu: guest RAM must be a shared memfd backend (memory-backend-memfd,share=on)")
	// ErrExitedEarly: QEMU ended before its monitor answered (a bad
	// option, missing firmware); the error quotes its last stderr lines.
	ErrExitedEarly = errors.New("qemu: exited before QMP was up")
)

// Root is a directory holding a Debian root with qemu-system-x86 installed.
type Root string

// paths within the root
const (
	loaderPath = "lib64/ld-linux-x86-64.so.2"
	qemuPath   = "usr/bin/qemu-system-x86_64"
)

// Check reports whether the root holds a runnable QEMU.
func (r Root) Check() error {
	for _, p := range []string{loaderPath, qemuPath} {
		if _, err := os.Stat(filepath.Join(string(r), p)); err != nil {
			return fmt.Errorf("%w at %s (run `make provision`): %v", ErrNoRoot, r, err)
		}
	}
	return nil
}

// Command returns an exec.Cmd running the root's qemu-system-x86_64 with
// args, through the root's loader and libraries, with the root's firmware
// and module directories.
func (r Root) Command(ctx context.Context, args ...string) *exec.Cmd {
	dir := string(r)
	libs := strings.Join([]string{
		filepath.Join(dir, "lib/x86_64-linux-gnu"),
		filepath.Join(dir, "usr/lib/x86_64-linux-gnu"),
	}, ":")
	full := append([]string{
		"--library-path", libs, filepath.Join(dir, qemuPath),
		"-L", filepath.Join(dir, "usr/share/qemu"),
		"-L", filepath.Join(dir, "usr/share/seabios"),
	}, args...)
	cmd := exec.CommandContext(ctx, filepath.Join(dir, loaderPath), full...)
	cmd.Env = append(os.Environ(), "QEMU_MODULE_DIR="+filepath.Join(dir, "usr/lib/x86_64-linux-gnu/qemu"))
	return cmd
}

// Version returns the first line of `qemu-system-x86_64 --version`.
func (r Root) Version(ctx context.Context) (string, error) {
	out, err := r.Command(ctx, "--version").Output()
	if err != nil {
		return "", fmt.Errorf("qemu: --version: %w", err)
	}
	line, _, _ := strings.Cut(string(out), "\n")
	return line, nil
}

// Spec is the part of a VM's QEMU configuration that is the same on every
// host: what a migration's destination starts its QEMU with. Each host adds
// its own parts (Config): the vGPU's vfio-user socket, the QMP socket, the
// serial console and, on a destination, -incoming.
type Spec struct {
	// Machine is the machine type: "pc" (the default; i440FX with the
	// PIIX3 chipset) or "q35" (ICH9), or a versioned name of either
	// ("pc-i440fx-11.1", "pc-q35-11.1"). gmigd restores the vGPU's
	// interrupt routing through these chipsets after a migration; others
	// are refused (ErrMachine).
	Machine  string `json:"machine,omitempty"`
	MemoryMB int    `json:"memory_mb,omitempty"` // guest RAM; default 512
	CPUs     int    `json:"cpus,omitempty"`      // default 1
	// Accel is "kvm" or "tcg"; "" picks DefaultAccel() where the VM first
	// starts, and Resolve records the choice so a destination runs the
	// same accelerator and CPU model.
	Accel  string `json:"accel,omitempty"`
	Kernel string `json:"kernel,omitempty"` // bzImage or vmlinux for direct boot
	Initrd string `json:"initrd,omitempty"`
	Append string `json:"append,omitempty"` // kernel command line
	// Extra arguments appended as they are (disks, network). A memory
	// backend among them that is not a shared memfd is refused.
	Extra []string `json:"extra,omitempty"`
	// Argv is, for a VM gmigd adopted, the command line QEMU was started
	// with, less what each host sets (Adopt); the fields above are then
	// unused.
	Argv []string `json:"argv,omitempty"`
}

// Config describes one VM on this host.
type Config struct {
	Spec
	Root Root
	// VfioUser is the vGPU's vfio-user socket; empty means no vGPU.
	VfioUser string
	// RunDir holds the monitors' sockets (RunDir/qmp.sock, and the
	// readline HMP monitor's HMPSocket for the front end's restore,
	// hmpmon.go); required.
	RunDir string
	// Serial receives the guest's serial console.
	Serial io.Writer
	// Incoming starts the VM waiting for a migration (-incoming defer),
	// paused until `cont`; Incoming.Listen sets where it listens.
	Incoming bool
	// Scope, if set, is the transient systemd scope unit QEMU runs in
	// (scope.go; UseScopes says when, ScopeUnit names it).
	Scope string
	// Log receives what the VM's control says on its own (the zero
	// Logger: nothing).
	Log zerolog.Logger
}

// Errors about a VM's configuration.
var (
	ErrMachine = errors.New("qemu: machine type must be pc or q35 (gmigd restores interrupt routing through their chipsets)")
)

// Chipset is the interrupt router a machine type has.
type Chipset int

// Chipsets gmigd knows how to re-route INTx through after a migration.
const (
	PIIX3 Chipset = iota + 1 // pc (i440FX)
	ICH9                     // q35
)

// ChipsetOf returns the chipset of machine type m ("" is "pc").
func ChipsetOf(m string) (Chipset, error) {
	switch {
	case m == "" || m == "pc" || strings.HasPrefix(m, "pc-i440fx-"):
		return PIIX3, nil
	case m == "q35" || strings.HasPrefix(m, "pc-q35-"):
		return ICH9, nil
	}
	return 0, fmt.Errorf("%w: %q", ErrMachine, m)
}

// Resolve fills in the defaults a destination must not choose on its own:
// the machine type, memory, CPUs and the accelerator.
func (s Spec) Resolve() (Spec, error) {
	if len(s.Argv) > 0 {
		return s, nil
	}
	if s.Machine == "" {
		s.Machine = "pc"
	}
	if _, err := ChipsetOf(s.Machine); err != nil {
		return s, err
	}
	if s.MemoryMB == 0 {
		s.MemoryMB = 512
	}
	if s.CPUs == 0 {
		s.CPUs = 1
	}
	if s.Accel == "" {
		s.Accel, _ = DefaultAccel()
	}
	return s, nil
}

// DefaultAccel picks KVM when the CPU has hardware virtualization (vmx or
// svm in /proc/cpuinfo) and /dev/kvm opens, and TCG otherwise, with the
// reason. Some hosts offer a /dev/kvm without hardware virtualization (a
// paravirtual "PVM" KVM inside a microVM): it runs unmodified guests through
// an instruction emulator, far slower than TCG and unable to execute VEX
// instructions such as the Debian kernel decompressor's BMI2 code.
func DefaultAccel() (accel, why string) {
	if err := CheckKVM(); err != nil {
		return "tcg", err.Error()
	}
	info, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "tcg", err.Error()
	}
	for _, l := range strings.Split(string(info), "\n") {
		if strings.HasPrefix(l, "flags") {
			for _, f := range strings.Fields(l) {
				if f == "vmx" || f == "svm" {
					return "kvm", "hardware virtualization (" + f + ")"
				}
			}
			break
		}
	}
	return "tcg", "/dev/kvm exists but the CPU has no vmx/svm: a paravirtual KVM that cannot run an unmodified Linux guest"
}

// Args returns QEMU's command line for c (without the loader prefix): the
// spec's portable part, then this host's.
func (c Config) Args() ([]string, error) {
	args, err := c.Spec.args()
	if err != nil {
		return nil, err
	}
	args = append(args,
		"-serial", "stdio",
		"-qmp", "unix:"+filepath.Join(c.RunDir, "qmp.sock")+",server=on,wait=off",
	)
	// A second monitor, readline HMP, for the front end's port accesses
	// (hmpmon.go).
	args = append(args, hmpArgs(c.RunDir)...)
	if c.VfioUser != "" {
		dev, _ := json.Marshal(map[string]any{
			"driver": "vfio-user-pci", "id": DeviceID,
			"socket": map[string]string{"path": c.VfioUser, "type": "unix"},
		})
		args = append(args, "-device", string(dev))
	}
	if c.Incoming {
		args = append(args, "-S", "-incoming", "defer")
	}
	return args, nil
}

// DeviceID is the QEMU device id gmigd gives the vGPU's vfio-user-pci
// front end.
const DeviceID = "gpu0"

// args is the portable part of the command line.
func (s Spec) args() ([]string, error) {
	if len(s.Argv) > 0 {
		if err := checkMemoryArgs(s.Argv); err != nil {
			return nil, err
		}
		return slices.Clone(s.Argv), nil
	}
	s, err := s.Resolve()
	if err != nil {
		return nil, err
	}
	if err := checkMemoryArgs(s.Extra); err != nil {
		return nil, err
	}
	cpu := "host"
	switch s.Accel {
	case "kvm":
	case "tcg":
		cpu = "max"
	default:
		return nil, fmt.Errorf("qemu: accelerator %q: want kvm or tcg", s.Accel)
	}
	args := []string{
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-accel", s.Accel, "-cpu", cpu, "-smp", fmt.Sprint(s.CPUs),
		"-m", fmt.Sprintf("%dM", s.MemoryMB),
		// Guest RAM as a shared memfd: only then does QEMU pass gmigd fds
		// it can map (docs/testing.md, "QEMU and vfio-user").
		"-object", fmt.Sprintf("memory-backend-memfd,id=mem,size=%dM,share=on", s.MemoryMB),
		"-machine", s.Machine + ",memory-backend=mem",
	}
	if s.Kernel != "" {
		args = append(args, "-kernel", s.Kernel)
	}
	if s.Initrd != "" {
		args = append(args, "-initrd", s.Initrd)
	}
	if s.Append != "" {
		args = append(args, "-append", s.Append)
	}
	return append(args, s.Extra...), nil
}

// checkMemoryArgs refuses extra arguments that would give the guest RAM gmigd
// cannot see: with share=off QEMU still passes an fd, mmap succeeds, and
// gmigd reads zeros (docs/testing.md, "QEMU 11.1 and vfio-user").
func checkMemoryArgs(extra []string) error {
	for _, a := range extra {
		if isMemoryBackend(a) && !isSharedMemfd(a) {
			return fmt.Errorf("%w: refusing %q", ErrSharedMemory, a)
		}
	}
	return nil
}

// isMemoryBackend reports whether an -object value (key=value or JSON
// form) is a memory backend.
func isMemoryBackend(v string) bool {
	v = strings.TrimSpace(v)
	if strings.HasPrefix(v, "{") {
		var o struct {
			Type string `json:"qom-type"`
		}
		return json.Unmarshal([]byte(v), &o) == nil && strings.HasPrefix(o.Type, "memory-backend-")
	}
	return strings.HasPrefix(v, "memory-backend-")
}

// isSharedMemfd reports whether an -object value is a memfd memory backend
// with share on: "memory-backend-memfd,...,share=on" or the JSON form
// libvirt writes, {"qom-type":"memory-backend-memfd",...,"share":true}.
func isSharedMemfd(v string) bool {
	if !strings.Contains(v, "memory-backend-memfd") {
		return false
	}
	if strings.HasPrefix(strings.TrimSpace(v), "{") {
		var o struct {
			Type  string `json:"qom-type"`
			Share bool   `json:"share"`
		}
		return json.Unmarshal([]byte(v), &o) == nil && o.Type == "memory-backend-memfd" && o.Share
	}
	for _, kv := range strings.Split(v, ",") {
		if kv == "share=on" || kv == "share=true" || kv == "share=yes" {
			return true
		}
	}
	return false
}

// VM is a running QEMU: one this package started (Start) or one started by
// someone else and adopted by its QMP socket (Adopt).
type VM struct {
	cfg    Config
	cmd    *exec.Cmd // nil when adopted
	pid    int
	qmpMu  sync.Mutex // guards qmp, which closeQMP clears
	qmp    *qmp.SocketMonitor
	events *events
	stderr *lastLines // nil when adopted
	// console is QEMU's stderr on its way to the console log (nil when
	// adopted or without a console).
	console *prefixedLines
	fe      frontEnd // the front end's restore (frontend_io.go)
	done    chan struct{}
	err     error
}

// Start launches the VM and connects QMP.
func Start(ctx context.Context, c Config) (*VM, error) {
	if err := c.Root.Check(); err != nil {
		return nil, err
	}
	if c.Spec.Argv == nil {
		spec, err := c.Spec.Resolve()
		if err != nil {
			return nil, err
		}
		c.Spec = spec
	}
	if c.Accel == "kvm" {
		if err := CheckKVM(); err != nil {
			return nil, err
		}
	}
	if c.RunDir == "" {
		return nil, errors.New("qemu: Config.RunDir is required")
	}
	args, err := c.Args()
	if err != nil {
		return nil, err
	}
	cmd, err := scoped(c.Root.Command(context.Background(), args...), c.Scope)
	if err != nil {
		return nil, err
	}
	// A gmigd that dies does not signal QEMU (its own process group), but
	// its vGPU's device model dies with it and QEMU 11.1.3's vfio-user
	// client aborts once the guest uses the device (migration-protocol.md
	// §3). A destination's QEMU waiting for an incoming migration is
	// paused and never runs the VM without the commit; a restarted gmigd
	// ends it, and reports the VMs its last run left (hostd.recoverVMs).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	vm := &VM{cfg: c, cmd: cmd, events: newEvents(), stderr: &lastLines{}, done: make(chan struct{})}
	cmd.Stdout, cmd.Stderr = c.Serial, vm.stderrTo(c.Serial)
	if cmd.Stdout == nil {
		cmd.Stdout = io.Discard
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("qemu: starting: %w", err)
	}
	vm.pid = cmd.Process.Pid
	go func() {
		vm.err = cmd.Wait()
		if vm.console != nil {
			vm.console.flush()
		}
		close(vm.done)
	}()
	if err := vm.connectQMP(ctx, filepath.Join(c.RunDir, "qmp.sock")); err != nil {
		vm.Kill()
		return nil, err
	}
	return vm, nil
}

// connectQMP waits for QEMU to create its QMP socket, then connects. QEMU
// creates the socket before it starts the guest; the wait ends early if QEMU
// exits.
func (vm *VM) connectQMP(ctx context.Context, path string) error {
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := os.Stat(path); err == nil {
			mon, err := qmp.NewSocketMonitor("unix", path, 5*time.Second)
			if err == nil {
				if err = mon.Connect(); err == nil {
					vm.qmpMu.Lock()
					vm.qmp = mon
					vm.qmpMu.Unlock()
					ch, _ := mon.Events(context.Background())
					go vm.events.pump(ch)
					return nil
				}
			}
		}
		select {
		case <-vm.done:
			return fmt.Errorf("%w (%s)", ErrExitedEarly, vm.exitReason())
		case <-ctx.Done():
			return fmt.Errorf("qemu: waiting for QMP: %w", ctx.Err())
		case <-tick.C:
		}
	}
}

// QMP runs one QMP command with arguments (nil for none) and returns its
// "return" value.
func (vm *VM) QMP(command string, arguments any) (json.RawMessage, error) {
	req := map[string]any{"execute": command}
	if arguments != nil {
		req["arguments"] = arguments
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, err
	}
	vm.qmpMu.Lock()
	mon := vm.qmp
	vm.qmpMu.Unlock()
	if mon == nil {
		return nil, vm.ended(fmt.Errorf("qemu: %s: %w", command, ErrGone), 0)
	}
	raw, err := mon.Run(b)
	if err != nil {
		err = fmt.Errorf("qemu: %s: %w", command, err)
		if connectionLost(err) {
			return nil, vm.ended(err, exitGrace)
		}
		return nil, err
	}
	var resp struct {
		Return json.RawMessage `json:"return"`
	}
	if err := json.Unmarshal(raw, &resp); err != nil {
		return nil, fmt.Errorf("qemu: %s: decoding %q: %w", command, raw, err)
	}
	return resp.Return, nil
}

// Status returns the VM's run state (query-status), e.g. "running".
func (vm *VM) Status() (string, error) {
	raw, err := vm.QMP("query-status", nil)
	if err != nil {
		return "", err
	}
	var st struct{ Status string }
	if err := json.Unmarshal(raw, &st); err != nil {
		return "", fmt.Errorf("qemu: query-status: %w", err)
	}
	return st.Status, nil
}

// Config is the configuration the VM runs with (the spec resolved).
func (vm *VM) Config() Config { return vm.cfg }

// PID is QEMU's process id.
func (vm *VM) PID() int { return vm.pid }

// HMP runs a human monitor command line and returns its output.
func (vm *VM) HMP(line string) (string, error) {
	raw, err := vm.QMP("human-monitor-command", map[string]string{"command-line": line})
	if err != nil {
		return "", err
	}
	var out string
	if err := json.Unmarshal(raw, &out); err != nil {
		return "", fmt.Errorf("qemu: HMP %q: %w", line, err)
	}
	return out, nil
}

// Done is closed when QEMU has exited.
func (vm *VM) Done() <-chan struct{} { return vm.done }

// Wait waits for QEMU to exit (or ctx to end) and returns its exit error.
func (vm *VM) Wait(ctx context.Context) error {
	select {
	case <-vm.done:
		vm.closeQMP()
		return vm.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Quit asks QEMU to exit (QMP quit) and waits up to timeout before killing it.
func (vm *VM) Quit(timeout time.Duration) error {
	_, qerr := vm.QMP("quit", nil)
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	if err := vm.Wait(ctx); err != nil && errors.Is(err, context.DeadlineExceeded) {
		vm.Kill()
		return fmt.Errorf("qemu: did not quit within %v (killed)", timeout)
	}
	return qerr
}

// Kill ends QEMU at once and waits for it.
func (vm *VM) Kill() {
	if vm.cmd != nil {
		_ = vm.cmd.Process.Kill()
	} else {
		_ = syscall.Kill(vm.pid, syscall.SIGKILL)
	}
	<-vm.done
	vm.closeQMP()
}

func (vm *VM) closeQMP() {
	vm.qmpMu.Lock()
	mon := vm.qmp
	vm.qmp = nil
	vm.qmpMu.Unlock()
	if mon != nil {
		_ = mon.Disconnect()
	}
	vm.closeHMP()
}

// CheckKVM reports whether /dev/kvm can be opened read-write.
func CheckKVM() error {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoKVM, err)
	}
	return f.Close()
}
