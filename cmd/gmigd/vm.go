package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/hostd/qemu"
)

const vmUsage = `usage: gmigd vm [-run-dir DIR] <command>

  start NAME [flags] [-- EXTRA QEMU ARGS]   start QEMU with a new vGPU NAME
  adopt NAME -qmp SOCK -vgpu VGPU           take a running QEMU (e.g. libvirt's) under gmigd
  list                                      list VMs
  show NAME                                 describe one
  stop NAME                                 stop it (an adopted VM is only released)`

func cmdVM(args []string) error {
	fs := flag.NewFlagSet("vm", flag.ContinueOnError)
	runDir := fs.String("run-dir", hostd.DefaultRunDir, "the daemon's run directory (its control socket is gmigd.sock there)")
	fs.Usage = func() { fmt.Fprintln(fs.Output(), vmUsage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return err
	}
	c := hostd.NewClient(filepath.Join(*runDir, "gmigd.sock"))
	rest := fs.Args()
	if len(rest) == 0 {
		return fmt.Errorf("missing subcommand\n%s", vmUsage)
	}
	switch sub, rest := rest[0], rest[1:]; {
	case sub == "list":
		list, err := c.ListVMs()
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tKIND\tSTATE\tVGPU\tPID\tMACHINE\tQMP")
		for _, v := range list {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", v.Name, v.Kind, v.State, v.VGPU, v.PID, v.Machine, v.QMP)
		}
		return tw.Flush()
	case sub == "start" && len(rest) >= 1:
		return vmStart(c, rest[0], rest[1:])
	case sub == "adopt" && len(rest) >= 1:
		af := flag.NewFlagSet("adopt", flag.ContinueOnError)
		qmpPath := af.String("qmp", "", "the VM's QMP socket (required)")
		vgpuName := af.String("vgpu", "", "the vGPU on this host the VM uses as vfio-user-pci device id "+qemu.DeviceID+" (required)")
		if err := af.Parse(rest[1:]); err != nil {
			return err
		}
		if *qmpPath == "" || *vgpuName == "" {
			return fmt.Errorf("adopt needs -qmp and -vgpu\n%s", vmUsage)
		}
		info, err := c.AdoptVM(rest[0], hostd.AdoptRequest{QMP: *qmpPath, VGPU: *vgpuName})
		if err != nil {
			return err
		}
		return printJSON(info)
	case sub == "show" && len(rest) == 1:
		list, err := c.ListVMs()
		if err != nil {
			return err
		}
		for _, v := range list {
			if v.Name == rest[0] {
				return printJSON(v)
			}
		}
		return fmt.Errorf("no VM %q", rest[0])
	case sub == "stop" && len(rest) == 1:
		return c.StopVM(rest[0])
	}
	return fmt.Errorf("bad arguments %q\n%s", rest, vmUsage)
}

func vmStart(c *hostd.Client, name string, args []string) error {
	sf := flag.NewFlagSet("start", flag.ContinueOnError)
	var req hostd.StartVMRequest
	req.Name = name
	vgpuMem := byteSize(0)
	sf.Var(&vgpuMem, "vgpu-mem", "the vGPU's graphics memory (default 64M)")
	ram := byteSize(512 << 20)
	sf.Var(&ram, "mem", "guest RAM (a shared memfd)")
	sf.IntVar(&req.QEMU.CPUs, "cpus", 1, "vCPUs")
	sf.StringVar(&req.QEMU.Machine, "machine", "pc", "machine type: pc or q35")
	sf.StringVar(&req.QEMU.Accel, "accel", "", "kvm or tcg (default: kvm where the CPU has hardware virtualization)")
	sf.StringVar(&req.QEMU.Kernel, "kernel", "", "kernel to boot directly")
	sf.StringVar(&req.QEMU.Initrd, "initrd", "", "initramfs")
	sf.StringVar(&req.QEMU.Append, "append", "", "kernel command line")
	if err := sf.Parse(args); err != nil {
		return err
	}
	req.MemSize = uint64(vgpuMem)
	req.QEMU.MemoryMB = int(uint64(ram) >> 20)
	req.QEMU.Extra = sf.Args() // after --: disks, network
	for i, a := range req.QEMU.Extra {
		if strings.HasPrefix(a, "-") {
			break
		}
		return fmt.Errorf("unexpected argument %q before the extra QEMU arguments (put them after --)", req.QEMU.Extra[i])
	}
	info, err := c.StartVM(req)
	if err != nil {
		return err
	}
	return printJSON(info)
}
