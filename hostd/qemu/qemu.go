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
	"strings"
	"time"

	"github.com/digitalocean/go-qemu/qmp"
)

// Errors callers branch on.
var (
	ErrNoRoot       = errors.New("qemu: QEMU root not provisioned")
	ErrNoKVM        = errors.New("qemu: /dev/kvm not usable")
	ErrSharedMemory = errors.New("qemu: guest RAM must be a shared memfd backend (memory-backend-memfd,share=on)")
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

// Config describes one VM.
type Config struct {
	Root     Root
	Kernel   string // bzImage for direct boot
	Initrd   string
	Append   string // kernel command line
	MemoryMB int    // guest RAM; default 512
	CPUs     int    // default 1
	// VfioUser is the vGPU's vfio-user socket; empty means no vGPU.
	VfioUser string
	// RunDir holds the QMP socket; required.
	RunDir string
	// Serial receives the guest's serial console.
	Serial io.Writer
	// Incoming, if set, starts the VM waiting for a migration stream there
	// (e.g. "tcp:127.0.0.1:4444"), paused until `cont`.
	Incoming string
	// Accel is "kvm", "tcg" or "" for DefaultAccel().
	Accel string
	// Extra arguments appended as they are. A memory backend among them
	// that is not a shared memfd is refused.
	Extra []string
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

// Args returns QEMU's command line for c (without the loader prefix).
func (c Config) Args() ([]string, error) {
	if c.MemoryMB == 0 {
		c.MemoryMB = 512
	}
	if c.CPUs == 0 {
		c.CPUs = 1
	}
	if err := checkMemoryArgs(c.Extra); err != nil {
		return nil, err
	}
	if c.Accel == "" {
		c.Accel, _ = DefaultAccel()
	}
	cpu := "host"
	switch c.Accel {
	case "kvm":
	case "tcg":
		cpu = "max"
	default:
		return nil, fmt.Errorf("qemu: accelerator %q: want kvm or tcg", c.Accel)
	}
	args := []string{
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		"-accel", c.Accel, "-cpu", cpu, "-smp", fmt.Sprint(c.CPUs),
		"-m", fmt.Sprintf("%dM", c.MemoryMB),
		// Guest RAM as a shared memfd: only then does QEMU pass gmigd fds
		// it can map (notes/qemu-vfio-user.md).
		"-object", fmt.Sprintf("memory-backend-memfd,id=mem,size=%dM,share=on", c.MemoryMB),
		"-machine", "pc,memory-backend=mem",
		"-serial", "stdio",
		"-qmp", "unix:" + filepath.Join(c.RunDir, "qmp.sock") + ",server=on,wait=off",
	}
	if c.Kernel != "" {
		args = append(args, "-kernel", c.Kernel)
	}
	if c.Initrd != "" {
		args = append(args, "-initrd", c.Initrd)
	}
	if c.Append != "" {
		args = append(args, "-append", c.Append)
	}
	if c.VfioUser != "" {
		dev, _ := json.Marshal(map[string]any{
			"driver": "vfio-user-pci", "id": "gpu0",
			"socket": map[string]string{"path": c.VfioUser, "type": "unix"},
		})
		args = append(args, "-device", string(dev))
	}
	if c.Incoming != "" {
		args = append(args, "-S", "-incoming", c.Incoming)
	}
	return append(args, c.Extra...), nil
}

// checkMemoryArgs refuses extra arguments that would give the guest RAM gmigd
// cannot see: with share=off QEMU still passes an fd, mmap succeeds, and
// gmigd reads zeros (notes/qemu-vfio-user.md).
func checkMemoryArgs(extra []string) error {
	for _, a := range extra {
		if strings.Contains(a, "memory-backend") && !(strings.Contains(a, "memory-backend-memfd") && strings.Contains(a, "share=on")) {
			return fmt.Errorf("%w: refusing %q", ErrSharedMemory, a)
		}
		if strings.Contains(a, "share=off") {
			return fmt.Errorf("%w: refusing %q", ErrSharedMemory, a)
		}
	}
	return nil
}

// VM is a running QEMU.
type VM struct {
	cmd  *exec.Cmd
	qmp  *qmp.SocketMonitor
	done chan struct{}
	err  error
}

// Start launches the VM and connects QMP.
func Start(ctx context.Context, c Config) (*VM, error) {
	if err := c.Root.Check(); err != nil {
		return nil, err
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
	cmd := c.Root.Command(context.Background(), args...)
	cmd.Stdout, cmd.Stderr = c.Serial, c.Serial
	if cmd.Stdout == nil {
		cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("qemu: starting: %w", err)
	}
	vm := &VM{cmd: cmd, done: make(chan struct{})}
	go func() {
		vm.err = cmd.Wait()
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
					vm.qmp = mon
					return nil
				}
			}
		}
		select {
		case <-vm.done:
			return fmt.Errorf("qemu: exited before QMP was up: %v", vm.err)
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
	raw, err := vm.qmp.Run(b)
	if err != nil {
		return nil, fmt.Errorf("qemu: %s: %w", command, err)
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
	_ = vm.cmd.Process.Kill()
	<-vm.done
	vm.closeQMP()
}

func (vm *VM) closeQMP() {
	if vm.qmp != nil {
		_ = vm.qmp.Disconnect()
		vm.qmp = nil
	}
}

// CheckKVM reports whether /dev/kvm can be opened read-write.
func CheckKVM() error {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return fmt.Errorf("%w: %v", ErrNoKVM, err)
	}
	return f.Close()
}
