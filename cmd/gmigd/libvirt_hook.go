package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/hostd/libvirt"
)

const libvirtHookUsage = `usage: gmigd libvirt-hook DOMAIN OPERATION SUB-OPERATION EXTRA [-run-dir DIR]

libvirt's qemu hook for domains with a gmig vGPU (<gmig:vgpu> in their
<metadata>); the domain's XML comes on stdin. Installed as
/etc/libvirt/hooks/qemu (a script that runs it with "$@"); other domains
pass untouched. OPERATION:
  prepare  create the domain's vGPU (before QEMU starts)
  started  adopt its QEMU into gmigd (gmigd vm adopt) through its -qmp socket
  release  release the VM from gmigd and remove the vGPU the hook created
  migrate  refuse: virsh migrate would lose the vGPU's state (use gmigd migrate)
  restore  refuse: a saved image does not hold the vGPU's state
Exits non-zero with the reason on stderr when it refuses, which libvirt
shows the operator. See docs/operator-guide.md.`

// errHookRefused is an operation the hook refuses for a gmig domain.
var errHookRefused = errors.New("refused")

// hookDaemon is what the hook asks of gmigd (hostd.Client).
type hookDaemon interface {
	Create(req hostd.CreateRequest) (hostd.Info, error)
	List() ([]hostd.Info, error)
	Destroy(name string) error
	ListVMs() ([]hostd.VMInfo, error)
	AdoptVM(name string, req hostd.AdoptRequest) (hostd.VMInfo, error)
	StopVM(name string) error
}

// The hook is a command of its own file, registered here so main.go's
// table stays as the other commands have it.
func init() { commands["libvirt-hook"] = cmdLibvirtHook }

func cmdLibvirtHook(args []string) error {
	fs := newFlagSet("libvirt-hook", libvirtHookUsage)
	runDir := hostd.DefaultRunDir
	runDirFlag(fs, &runDir)
	pos, _, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 2 || len(pos) > 4 {
		return badUsage(fs, "want DOMAIN OPERATION [SUB-OPERATION EXTRA], got %q", pos)
	}
	return libvirtHook{runDir: runDir, daemon: client(runDir)}.run(pos[1], os.Stdin)
}

// libvirtHook is one call of the hook for the daemon of runDir.
type libvirtHook struct {
	runDir string
	daemon hookDaemon
}

// run handles operation op for the domain whose XML is in x.
func (h libvirtHook) run(op string, x io.Reader) error {
	d, err := libvirt.Parse(x)
	if err != nil {
		return err
	}
	if d.VGPU == nil {
		return nil // not a gmig domain
	}
	switch op {
	case "prepare":
		return h.prepare(d)
	case "started":
		return h.started(d)
	case "release":
		return h.release(d.Name)
	case "migrate":
		return fmt.Errorf("%w: domain %s has a gmig vGPU; virsh migrate would lose its device state; run: gmigd migrate %s --to HOST:PORT", errHookRefused, d.Name, d.Name)
	case "restore":
		return fmt.Errorf("%w: domain %s has a gmig vGPU; a saved image does not hold its device state (gmig VMs are not saved and restored through libvirt)", errHookRefused, d.Name)
	}
	return nil
}

// prepare creates the domain's vGPU, before QEMU starts and connects to it.
func (h libvirtHook) prepare(d libvirt.Domain) error {
	if dest, ok := libvirt.Moved(h.runDir, d.Name); ok {
		return fmt.Errorf("%w: domain %s was moved to %s by gmigd migrate and runs there, on the same disks; not starting a second copy (remove %s/%s.moved to start it here)",
			errHookRefused, d.Name, dest, libvirt.Dir(h.runDir), d.Name)
	}
	socks, err := d.Check()
	if err != nil {
		return err
	}
	vms, err := h.daemon.ListVMs()
	if err != nil {
		return err
	}
	for _, vm := range vms {
		if vm.Name == d.Name {
			return fmt.Errorf("%w: VM %s already runs here under gmigd (%s; a migration brought it?); not starting a second copy (gmigd vm stop %s first)",
				errHookRefused, d.Name, vm.State, d.Name)
		}
	}
	info, err := h.daemon.Create(hostd.CreateRequest{Name: d.Name, MemSize: d.VGPU.MemSize, Backend: d.VGPU.Backend})
	if err != nil {
		return fmt.Errorf("creating domain %s's vGPU: %w", d.Name, err)
	}
	if info.Socket != socks.VGPU {
		err := fmt.Errorf("%w: domain %s's vfio-user-pci device names socket %s, but gmigd serves its vGPU on %s: put that path in <qemu:commandline>", errHookRefused, d.Name, socks.VGPU, info.Socket)
		return errors.Join(err, h.daemon.Destroy(d.Name))
	}
	if err := libvirt.MarkCreated(h.runDir, d.Name); err != nil {
		return errors.Join(err, h.daemon.Destroy(d.Name))
	}
	return nil
}

// started adopts the domain's QEMU into gmigd through its own QMP socket
// (QEMU is up, its vCPUs not yet running).
func (h libvirtHook) started(d libvirt.Domain) error {
	if !libvirt.Created(h.runDir, d.Name) {
		return nil
	}
	socks, err := d.Check()
	if err != nil {
		return err
	}
	if _, err := h.daemon.AdoptVM(d.Name, hostd.AdoptRequest{QMP: socks.QMP, VGPU: d.Name}); err != nil {
		return fmt.Errorf("adopting domain %s's QEMU: %w", d.Name, err)
	}
	return nil
}

// release ends what prepare and started began, once libvirt's QEMU has
// ended: gmigd forgets the adopted VM and the vGPU is removed. A VM or vGPU
// the hook did not make (one a migration brought here) is left alone, and
// so is one in a migration (gmigd ends those itself).
func (h libvirtHook) release(name string) error {
	if !libvirt.Created(h.runDir, name) {
		return nil
	}
	vms, err := h.daemon.ListVMs()
	if err != nil {
		return err
	}
	for _, vm := range vms {
		if vm.Name == name && vm.Adopted && vm.State != "migrating" && vm.State != "outcome-unknown" {
			if err := h.daemon.StopVM(name); err != nil {
				return fmt.Errorf("releasing VM %s from gmigd: %w", name, err)
			}
		}
	}
	vgpus, err := h.daemon.List()
	if err != nil {
		return err
	}
	for _, v := range vgpus {
		if v.Name == name && v.State == "live" {
			if err := h.daemon.Destroy(name); err != nil {
				return fmt.Errorf("removing domain %s's vGPU: %w", name, err)
			}
		}
	}
	return libvirt.Released(h.runDir, name)
}
