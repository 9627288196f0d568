package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/gmig-dev/gmig/hostd"
)

const vgpuUsage = `usage: gmigd vgpu [-run-dir DIR] <create NAME [-mem SIZE] [-backend software|cuda] [-guest-modules] | list | show NAME | rm NAME>`

func cmdVGPU(args []string) error {
	fs := flag.NewFlagSet("vgpu", flag.ContinueOnError)
	runDir := fs.String("run-dir", hostd.DefaultRunDir, "the daemon's run directory (its control socket is gmigd.sock there)")
	fs.Usage = func() { fmt.Fprintln(fs.Output(), vgpuUsage); fs.PrintDefaults() }
	if err := fs.Parse(args); err != nil {
		return err
	}
	c := hostd.NewClient(filepath.Join(*runDir, "gmigd.sock"))
	rest := fs.Args()
	if len(rest) == 0 {
		return fmt.Errorf("missing subcommand\n%s", vgpuUsage)
	}
	switch sub, rest := rest[0], rest[1:]; {
	case sub == "list":
		list, err := c.List()
		if err != nil {
			return err
		}
		tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "NAME\tMEM\tBACKEND\tPOOL OFFSET\tSOCKET\tFENCES\tFAULTS")
		for _, i := range list {
			fmt.Fprintf(tw, "%s\t%dM\t%s\t%#x\t%s\t%d\t%d\n", i.Name, i.MemSize>>20, i.Backend, i.PoolOffset, i.Socket, i.Stats.Fences, i.Stats.Faults)
		}
		return tw.Flush()
	case sub == "create" && len(rest) >= 1:
		cf := flag.NewFlagSet("create", flag.ContinueOnError)
		mem := byteSize(0)
		cf.Var(&mem, "mem", "graphics memory (power of two, ≥ 1M; default 64M)")
		backend := cf.String("backend", "software", "what runs the vGPU's commands: software, or cuda (NVIDIA GPU 0; docs/nvidia.md)")
		modules := cf.Bool("guest-modules", false, "cuda: let the guest load its own PTX (see docs/nvidia.md, Isolation)")
		if err := cf.Parse(rest[1:]); err != nil {
			return err
		}
		info, err := c.Create(hostd.CreateRequest{Name: rest[0], MemSize: uint64(mem), Backend: *backend, GuestModules: *modules})
		if err != nil {
			return err
		}
		return printJSON(info)
	case sub == "show" && len(rest) == 1:
		info, err := c.Get(rest[0])
		if err != nil {
			return err
		}
		return printJSON(info)
	case sub == "rm" && len(rest) == 1:
		return c.Destroy(rest[0])
	}
	return fmt.Errorf("bad arguments %q\n%s", rest, vgpuUsage)
}

func printJSON(v any) error {
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
