// Command gmig-guest is the guest-side program of gmig: a static binary that
// runs inside a Linux guest (as the initramfs's /init, or as an ordinary
// program under root), finds the vGPU by vendor and device ID, drives it
// through /sys/bus/pci/devices/*/resourceN with no kernel module of ours,
// and reports over the serial console.
//
// It runs, in order: a measurement of trapped MMIO and doorbell round trips;
// the correctness suite (polling, then with interrupts: -irq=intx, the
// default, takes INTx through uio_pci_generic; -irq=msi takes MSI through
// vfio-pci; -irq=none only polls);
// with -steps, a seeded workload that writes HEARTBEAT every -heartbeat
// so the host can time the guest's pauses with its own clock, ending with
// the workload's graphics-memory digest; and, with -hostile, the hostile
// guest program, which attacks its own vGPU for -hostile-for and checks
// that the device refuses every attempt. With -cuda it runs a CUDA program
// on the guest's libcuda.so.1 instead (cuda.go).
//
// As PID 1 it mounts /proc, /sys and /dev, reserves huge pages for DMA,
// loads the kernel modules its interrupt mode needs from those it carries,
// takes its flags from the kernel command line (gmig.steps=200 gmig.seed=7
// gmig.irq=msi ...) and powers the machine off at the end. Every report
// line starts with "gmig: "; "gmig: interrupts MODE" says which interrupt
// mode is in use.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/sysfs"
)

type options struct {
	suite     bool
	steps     int
	check     bool
	progress  int
	seed      int64
	heartbeat time.Duration
	irq       sysfs.IRQMode
	measure   int
	modules   string
	workload  string
	// hostile names the attacks of the hostile guest program to run
	// (guest.ParseAttacks; "": none), for hostileFor.
	hostile    string
	hostileFor time.Duration
	// cuda is a CUDA program to run instead of everything else,
	// PROGRAM[,ARG...] (cuda.go).
	cuda string
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("gmig-guest", flag.ContinueOnError)
	fs.BoolVar(&o.suite, "suite", true, "run the correctness suite")
	fs.IntVar(&o.steps, "steps", 0, "workload steps to run (0: no workload)")
	fs.BoolVar(&o.check, "check", false, "check every DMA read and the graphics pages each workload step changed against a reference model, and the whole region at the end")
	fs.IntVar(&o.progress, "progress", 0, "report the workload's progress every N steps (0: never)")
	fs.Int64Var(&o.seed, "seed", 1, "workload seed")
	fs.DurationVar(&o.heartbeat, "heartbeat", time.Millisecond, "HEARTBEAT write period during the workload (0: none)")
	o.irq = sysfs.IRQINTx
	fs.Var((*irqFlag)(&o.irq), "irq", "also run with interrupts: intx (INTx through uio_pci_generic), msi (MSI through vfio-pci) or none; true means intx, false none")
	fs.IntVar(&o.measure, "measure", 2000, "iterations of each latency measurement (0: skip)")
	fs.StringVar(&o.modules, "modules", "/lib/modules/gmig", "directory of the kernel modules to load and their modules.dep")
	fs.StringVar(&o.hostile, "hostile", "", "run the hostile guest program with these attacks: all, or a list of gtt,dma,copy,ring,irq,reset,kernel (docs/security.md, \"Hostile guests\")")
	fs.DurationVar(&o.hostileFor, "hostile-for", 30*time.Second, "how long the hostile program attacks")
	fs.StringVar(&o.workload, "workload", "", "workload profile and settings, e.g. render,rate=200,fill=0.75 (guest.ParseWorkload; default: the seeded mix)")
	fs.StringVar(&o.cuda, "cuda", "", "run this CUDA program on the guest's libcuda.so.1 instead of the measurement, suite and workload: PROGRAM[,ARG...], e.g. /usr/bin/cuda-probe,40,100 (docs/cuda.md)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	return o, nil
}

func main() {
	pid1 := os.Getpid() == 1
	args := os.Args[1:]
	if pid1 {
		if err := setupInit(); err != nil {
			report("init: %v", err)
		}
		args = cmdlineFlags()
	}
	ok := run(args)
	if ok {
		report("result ok")
	} else {
		report("result FAIL")
	}
	if pid1 {
		unix.Sync()
		_ = unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	}
	if !ok {
		os.Exit(1)
	}
}

// report writes one line to the console.
func report(format string, args ...any) {
	fmt.Fprintf(os.Stdout, "gmig: "+format+"\n", args...)
}

func run(args []string) bool {
	o, err := parseFlags(args)
	if err != nil {
		report("flags: %v", err)
		return false
	}
	if o.cuda != "" {
		return cudaProgram(o)
	}
	bus, ok := openBus(o)
	if bus == nil {
		return false
	}
	defer bus.Close()
	o.irq = bus.IRQMode()
	ctx := context.Background()
	if o.measure > 0 {
		ok = measure(ctx, bus, o) && ok
	}
	if o.suite {
		ok = suite(ctx, bus, guest.Options{Seed: o.seed}, "polling") && ok
		if o.irq != sysfs.IRQNone {
			ok = suite(ctx, bus, guest.Options{Seed: o.seed, UseIRQ: true}, "interrupts") && ok
		}
	}
	if o.steps > 0 {
		ok = workload(ctx, bus, o) && ok
	}
	if o.hostile != "" {
		ok = hostile(ctx, bus, o) && ok
	}
	reportIRQCounts(bus)
	return ok
}

func suite(ctx context.Context, bus guest.Bus, opts guest.Options, mode string) bool {
	d, err := guest.Open(bus, opts)
	if err != nil {
		report("suite (%s): opening the device: %v", mode, err)
		return false
	}
	r := guest.Suite(ctx, d)
	for _, line := range strings.Split(strings.TrimSpace(r.String()), "\n") {
		report("suite (%s): %s", mode, line)
	}
	return r.OK()
}

// setupInit does what an init must before anything else works.
func setupInit() error {
	mounts := []struct{ src, dst, fstype string }{
		{"proc", "/proc", "proc"}, {"sysfs", "/sys", "sysfs"}, {"devtmpfs", "/dev", "devtmpfs"},
	}
	for _, m := range mounts {
		_ = os.MkdirAll(m.dst, 0o755)
		if err := unix.Mount(m.src, m.dst, m.fstype, 0, ""); err != nil && err != unix.EBUSY {
			return fmt.Errorf("mounting %s: %w", m.dst, err)
		}
	}
	// Huge pages for DMA memory: 8 x 2 MiB.
	if err := os.WriteFile("/proc/sys/vm/nr_hugepages", []byte("8"), 0); err != nil {
		return fmt.Errorf("reserving huge pages: %w", err)
	}
	return nil
}

// cmdlineFlags turns gmig.NAME=VALUE words of the kernel command line into
// -NAME=VALUE flags.
func cmdlineFlags() []string {
	b, err := os.ReadFile("/proc/cmdline")
	if err != nil {
		return nil
	}
	var out []string
	for _, w := range strings.Fields(string(b)) {
		if rest, ok := strings.CutPrefix(w, "gmig."); ok {
			out = append(out, "-"+rest)
		}
	}
	return out
}
