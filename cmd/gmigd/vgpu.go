package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"text/tabwriter"

	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/vgpu"
)

const vgpuUsage = `usage: gmigd vgpu <command> [flags] [arguments]

  create NAME [-mem SIZE] [-local-mem SIZE] [-backend software|cuda] [-guest-modules] [-gpu-isolation process|shared]
                                                                       make a vGPU
  list                                                                 list vGPUs
  show NAME                                                            describe one
  rm NAME                                                              destroy one

Every command takes -run-dir DIR (before or after the command) and -h.`

// vgpuCommands are gmigd vgpu's commands.
var vgpuCommands = map[string]func(runDir *string, args []string) error{
	"create": vgpuCreate,
	"list":   vgpuList,
	"show":   vgpuShow,
	"rm":     vgpuRemove,
}

func cmdVGPU(args []string) error {
	return subcommand("vgpu", vgpuUsage, vgpuCommands, args)
}

func vgpuList(runDir *string, args []string) error {
	fs := newFlagSet("vgpu list", "usage: gmigd vgpu list [-run-dir DIR]\n\nLists the daemon's vGPUs.")
	runDirFlag(fs, runDir)
	if _, err := parseN(fs, args); err != nil {
		return err
	}
	list, err := client(*runDir).List()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tSTATE\tMEM\tBACKEND\tPOOL OFFSET\tSOCKET\tFENCES\tFAULTS")
	for _, i := range list {
		backend := i.Backend
		if i.GPUIsolation != "" {
			backend += "/" + i.GPUIsolation // cuda/process, cuda/shared
		}
		fmt.Fprintf(tw, "%s\t%s\t%dM\t%s\t%#x\t%s\t%d\t%d\n", i.Name, i.State, i.MemSize>>20, backend, i.PoolOffset, i.Socket, i.Stats.Fences, i.Stats.Faults)
	}
	return tw.Flush()
}

const vgpuCreateUsage = `usage: gmigd vgpu create NAME [flags]

Makes vGPU NAME in the daemon's pool and serves it on its vfio-user socket;
prints it as JSON, socket included.`

// vgpuFlags are a new vGPU's back end, guest modules and device-local
// memory: vgpu create's and vm start's flags.
type vgpuFlags struct {
	backend      string
	guestModules bool
	localMem     byteSize
	gpuIsolation string
}

func (v *vgpuFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&v.backend, "backend", vgpu.BackendSoftware, "what runs the vGPU's commands: software, or cuda (the NVIDIA GPU gmigd serve -gpu chose; docs/nvidia.md)")
	fs.BoolVar(&v.guestModules, "guest-modules", false, "cuda: let the guest load its own PTX (see docs/nvidia.md, Isolation)")
	fs.StringVar(&v.gpuIsolation, "gpu-isolation", "", "cuda: where the vGPU's GPU context lives: process (default: a GPU worker process of its own) or shared (gmigd's, with every other shared vGPU; docs/nvidia.md, Isolation); ignored for software vGPUs")
	fs.Var(&v.localMem, "local-mem", "device-local memory beside the graphics memory, reached by commands only (a multiple of 4K; default none; docs/device-abi.md §1.3)")
}

func vgpuCreate(runDir *string, args []string) error {
	fs := newFlagSet("vgpu create", vgpuCreateUsage)
	runDirFlag(fs, runDir)
	mem := byteSize(vgpu.DefaultMemSize)
	fs.Var(&mem, "mem", "graphics memory (a power of two, ≥ 1M)")
	var vf vgpuFlags
	vf.register(fs)
	pos, err := parseN(fs, args, "NAME")
	if err != nil {
		return err
	}
	if mem == 0 {
		return badUsage(fs, "-mem 0: want a size (e.g. 64M)")
	}
	info, err := client(*runDir).Create(hostd.CreateRequest{Name: pos[0], MemSize: uint64(mem), Backend: vf.backend, GuestModules: vf.guestModules, LocalMemSize: uint64(vf.localMem), GPUIsolation: vf.gpuIsolation})
	if err != nil {
		return err
	}
	return printJSON(info)
}

func vgpuShow(runDir *string, args []string) error {
	fs := newFlagSet("vgpu show", "usage: gmigd vgpu show NAME [-run-dir DIR]\n\nDescribes vGPU NAME as JSON.")
	runDirFlag(fs, runDir)
	pos, err := parseN(fs, args, "NAME")
	if err != nil {
		return err
	}
	info, err := client(*runDir).Get(pos[0])
	if err != nil {
		return err
	}
	return printJSON(info)
}

func vgpuRemove(runDir *string, args []string) error {
	fs := newFlagSet("vgpu rm", "usage: gmigd vgpu rm NAME [-run-dir DIR]\n\nDestroys vGPU NAME and frees its memory.")
	runDirFlag(fs, runDir)
	pos, err := parseN(fs, args, "NAME")
	if err != nil {
		return err
	}
	return client(*runDir).Destroy(pos[0])
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
