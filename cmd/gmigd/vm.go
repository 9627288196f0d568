package main

import (
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/hostd/qemu"
	"github.com/gmig-dev/gmig/vgpu"
)

const vmUsage = `usage: gmigd vm <command> [flags] [arguments]

  start NAME [flags] [-- EXTRA QEMU ARGS]   start QEMU with a new vGPU NAME
  adopt NAME -qmp SOCK -vgpu VGPU           take a running QEMU (e.g. libvirt's) under gmigd
  list                                      list VMs
  show NAME                                 describe one
  stop NAME                                 stop it (an adopted VM is only released)

Every command takes -run-dir DIR (before or after the command) and -h.`

// vmCommands are gmigd vm's commands.
var vmCommands = map[string]func(runDir *string, args []string) error{
	"start": vmStart,
	"adopt": vmAdopt,
	"list":  vmList,
	"show":  vmShow,
	"stop":  vmStop,
}

func cmdVM(args []string) error {
	return subcommand("vm", vmUsage, vmCommands, args)
}

// subcommand runs one of cmds, the commands of gmigd name, with args:
// -run-dir and -h may come before the command's name too.
func subcommand(name, usage string, cmds map[string]func(*string, []string) error, args []string) error {
	fs := newFlagSet(name, usage)
	runDir := hostd.DefaultRunDir
	runDirFlag(fs, &runDir)
	// The flags before the command: parsing stops at its name.
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() == 0 {
		return badUsage(fs, "missing command")
	}
	run, ok := cmds[fs.Arg(0)]
	if !ok {
		return badUsage(fs, "unknown command %q", fs.Arg(0))
	}
	if err := run(&runDir, fs.Args()[1:]); err != nil {
		return &subcommandError{name: name + " " + fs.Arg(0), err: err}
	}
	return nil
}

// subcommandError names the command of gmigd vm or vgpu that failed, for
// main's message ("gmigd vm list: ...").
type subcommandError struct {
	name string
	err  error
}

func (e *subcommandError) Error() string { return e.err.Error() }
func (e *subcommandError) Unwrap() error { return e.err }

// client is the control API client for the daemon of runDir.
func client(runDir string) *hostd.Client {
	return hostd.NewClient(filepath.Join(runDir, "gmigd.sock"))
}

func vmList(runDir *string, args []string) error {
	fs := newFlagSet("vm list", "usage: gmigd vm list [-run-dir DIR]\n\nLists the daemon's VMs.")
	runDirFlag(fs, runDir)
	if _, err := parseN(fs, args); err != nil {
		return err
	}
	list, err := client(*runDir).ListVMs()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tKIND\tSTATE\tVGPU\tPID\tMACHINE\tACCEL\tQMP")
	for _, v := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", v.Name, v.Kind, v.State, v.VGPU, v.PID, v.Machine, dash(v.Accel), v.QMP)
	}
	return tw.Flush()
}

// dash is s, or "-" for an empty column.
func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func vmShow(runDir *string, args []string) error {
	fs := newFlagSet("vm show", "usage: gmigd vm show NAME [-run-dir DIR]\n\nDescribes VM NAME as JSON.")
	runDirFlag(fs, runDir)
	pos, err := parseN(fs, args, "NAME")
	if err != nil {
		return err
	}
	list, err := client(*runDir).ListVMs()
	if err != nil {
		return err
	}
	for _, v := range list {
		if v.Name == pos[0] {
			return printJSON(v)
		}
	}
	return fmt.Errorf("no VM %q", pos[0])
}

func vmStop(runDir *string, args []string) error {
	fs := newFlagSet("vm stop", "usage: gmigd vm stop NAME [-run-dir DIR]\n\nStops VM NAME: QEMU quits and the vGPU made for it is destroyed; an\nadopted VM is only released from gmigd's care.")
	runDirFlag(fs, runDir)
	pos, err := parseN(fs, args, "NAME")
	if err != nil {
		return err
	}
	return client(*runDir).StopVM(pos[0])
}

func vmAdopt(runDir *string, args []string) error {
	fs := newFlagSet("vm adopt", "usage: gmigd vm adopt NAME -qmp SOCK -vgpu VGPU [-run-dir DIR]\n\nTakes a running QEMU (e.g. libvirt's) under gmigd as VM NAME.")
	runDirFlag(fs, runDir)
	qmpPath := fs.String("qmp", "", "the VM's QMP socket (required)")
	vgpuName := fs.String("vgpu", "", "the vGPU on this host the VM uses as vfio-user-pci device id "+qemu.DeviceID+" (required)")
	pos, err := parseN(fs, args, "NAME")
	if err != nil {
		return err
	}
	if *qmpPath == "" || *vgpuName == "" {
		return badUsage(fs, "adopt needs -qmp and -vgpu")
	}
	info, err := client(*runDir).AdoptVM(pos[0], hostd.AdoptRequest{QMP: *qmpPath, VGPU: *vgpuName})
	if err != nil {
		return err
	}
	return printJSON(info)
}

const vmStartUsage = `usage: gmigd vm start NAME [flags] [-- EXTRA QEMU ARGS]

Starts QEMU for VM NAME with a new vGPU of the same name; guest RAM is a
shared memfd. Arguments after -- go to QEMU as they are (disks, network).`

func vmStart(runDir *string, args []string) error {
	fs := newFlagSet("vm start", vmStartUsage)
	runDirFlag(fs, runDir)
	var req hostd.StartVMRequest
	vgpuMem := byteSize(vgpu.DefaultMemSize)
	fs.Var(&vgpuMem, "vgpu-mem", "the vGPU's graphics memory (a power of two, ≥ 1M)")
	var vf vgpuFlags
	vf.register(fs)
	ram := byteSize(512 << 20)
	fs.Var(&ram, "mem", "guest RAM (a shared memfd; whole MiB)")
	fs.IntVar(&req.QEMU.CPUs, "cpus", 1, "vCPUs")
	fs.StringVar(&req.QEMU.Machine, "machine", "pc", "machine type: pc or q35")
	fs.StringVar(&req.QEMU.Accel, "accel", "", "kvm or tcg (default: kvm where the CPU has hardware virtualization)")
	fs.StringVar(&req.QEMU.Kernel, "kernel", "", "kernel to boot directly")
	fs.StringVar(&req.QEMU.Initrd, "initrd", "", "initramfs")
	fs.StringVar(&req.QEMU.Append, "append", "", "kernel command line")
	pos, extra, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) != 1:
		return badUsage(fs, "want NAME, got %q (extra QEMU arguments go after --)", pos)
	case vgpuMem == 0:
		return badUsage(fs, "-vgpu-mem 0: want a size (e.g. 64M)")
	case ram < 1<<20 || ram%(1<<20) != 0:
		return badUsage(fs, "-mem %d: want whole MiB, at least 1M", uint64(ram))
	case req.QEMU.CPUs < 1:
		return badUsage(fs, "-cpus %d: want at least 1", req.QEMU.CPUs)
	}
	req.Name = pos[0]
	req.MemSize = uint64(vgpuMem)
	req.Backend, req.GuestModules, req.LocalMemSize, req.GPUIsolation = vf.backend, vf.guestModules, uint64(vf.localMem), vf.gpuIsolation
	req.QEMU.MemoryMB = int(uint64(ram) >> 20)
	req.QEMU.Extra = extra
	info, err := client(*runDir).StartVM(req)
	if err != nil {
		return err
	}
	return printJSON(info)
}
