package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"golang.org/x/term"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/hostd/qemu"
	"github.com/gmig-dev/gmig/internal/cluster"
	"github.com/gmig-dev/gmig/internal/cmdline"
	"github.com/gmig-dev/gmig/internal/inproc"
)

// qemuDemo is `gmigd demo`, the README's main job: two gmigd daemons on
// this machine, a Linux VM under QEMU 11.1 on the first using its vGPU (the
// in-guest program runs the correctness suite, then a self-checking seeded
// workload with a 1 ms heartbeat), `gmigd migrate` to the second in the
// middle of the workload, the report, and the guest's own verdict and
// digest against a run that was never migrated.
type qemuDemo struct {
	demo
	cache   string
	machine string
	cpus    int
	ramMB   int
	fps     int
	keep    bool
	accel   string // auto, kvm or tcg
	// The VM's vGPU: back end, guest modules, device-local memory.
	backend      string
	guestModules bool
	localMem     uint64
	// program is a CUDA program the guest runs instead of gmig-guest's
	// suite and workload (PROGRAM[,ARG...], demo_cuda.go), migrated once
	// it printed programLines lines.
	program      string
	programLines int
	noTracking   bool
	// initrd is the guest's initramfs (default: the cache's); e.g. the
	// cache's with a layer appended (scripts/pyguest.py).
	initrd string
	binary string // the gmigd the daemons run (default: this program)
	// streams is the daemons' -streams (0: their default).
	streams *int
}

func (q *qemuDemo) flags(fs *flag.FlagSet) {
	fs.StringVar(&q.cache, "cache", cmdline.DefaultCache(), "the provisioned QEMU root and guest kernel (make provision guest-image)")
	fs.StringVar(&q.machine, "machine", "pc", "QEMU machine type: pc or q35")
	fs.IntVar(&q.cpus, "cpus", 2, "guest vCPUs")
	fs.IntVar(&q.ramMB, "guest-ram", 512, "guest RAM in MiB")
	fs.IntVar(&q.fps, "fps", 20, "pace the guest's workload to at most this many steps a second (0: unpaced), so that under KVM it outlasts the migration")
	fs.BoolVar(&q.keep, "keep", false, "keep the daemons' run directories (logs, consoles)")
	fs.StringVar(&q.accel, "accel", "auto", "QEMU accelerator: auto (KVM where /dev/kvm is usable and the CPU has vmx/svm, else TCG), kvm or tcg")
	fs.StringVar(&q.backend, "backend", "software", "what runs the VM's vGPU commands: software, or cuda (an NVIDIA GPU; both daemons share it, each its own CUDA context)")
	fs.BoolVar(&q.guestModules, "guest-modules", false, "cuda: let the guest load its own PTX (docs/nvidia.md, Isolation)")
	fs.Var((*byteSize)(&q.localMem), "local-mem", "the vGPU's device-local memory (default none; docs/device-abi.md §1.3)")
	fs.StringVar(&q.program, "cuda-program", "", "the guest runs this CUDA program on its libcuda.so.1 instead of the suite and workload: PROGRAM[,ARG...] (e.g. /usr/bin/cuda-streams,100,100); a second VM on B runs it unmigrated and the outputs are compared")
	fs.IntVar(&q.programLines, "program-lines", 4, "-cuda-program: migrate once the program printed this many lines")
	fs.StringVar(&q.initrd, "initrd", "", "the guest's initramfs (default: the cache's guest/initramfs.cpio), e.g. a copy of it with another newc archive appended (docs/cuda.md, \"Python in the guest\")")
	q.streams = streamsFlag(fs, "the daemons' -streams: the vGPU stop phase's streams (0: their default, half the cores, at most 8)")
	fs.BoolVar(&q.noTracking, "no-tracking", false, "migrate without the log of the guest's aperture writes (the stop phase hashes every page), for comparison")
}

// Guest console lines the demo waits for (cmd/gmig-guest).
var (
	reStep   = regexp.MustCompile(`gmig: workload step (\d+)\b`)
	reResult = regexp.MustCompile(`gmig: result (ok|FAIL)`)
	// The workload's last line: its digest, or why it failed.
	reDigestOrFail = regexp.MustCompile(`gmig: workload(?: seed=\d+ steps=\d+ in \S+ digest=([0-9a-f]{64})|: (.*))`)
	reSuite        = regexp.MustCompile(`gmig: suite \((\w+)\): (\d+ passed, \d+ failed.*)`)
)

// demoCluster is what the QEMU demo runs on: two daemons with the
// neighbour vGPU on A.
type demoCluster struct {
	a, b           *cluster.Daemon
	accel          string
	kernel, initrd string
}

func (q *qemuDemo) run(ctx context.Context) error {
	if q.streams != nil {
		if err := checkStreams(*q.streams); err != nil {
			return err
		}
	}
	root := qemu.Root(filepath.Join(q.cache, "qemu-root"))
	if err := root.Check(); err != nil {
		return fmt.Errorf("%w\n(`make demo` provisions it; `gmigd demo -sim` runs without QEMU)", err)
	}
	kernel, initrd, err := q.guestImage()
	if err != nil {
		return err
	}
	if q.mem == 0 {
		q.mem = 64 << 20
	}
	accel, why, err := pickAccel(q.accel)
	if err != nil {
		return err
	}
	self := q.binary
	if self == "" {
		if self, err = os.Executable(); err != nil {
			return err
		}
	}
	dir, err := os.MkdirTemp("", "gmig-demo-")
	if err != nil {
		return err
	}
	if !q.keep {
		defer os.RemoveAll(dir)
	}
	fmt.Printf("gmigd demo: two gmigd daemons and a Linux VM under QEMU on this machine (%s: %s); files in %s\n", accel, why, dir)
	opts := cluster.Options{Binary: self, QEMURoot: string(root), Pool: q.poolSize(), LogLevel: q.logLevel(),
		Extra: cluster.BackendFlags(q.backend)}
	if q.streams != nil && *q.streams > 0 {
		opts.Extra = append(opts.Extra, "-streams", strconv.Itoa(*q.streams))
	}
	var daemons [2]*cluster.Daemon
	for i, name := range []string{"a", "b"} {
		d, err := cluster.Start(ctx, dir, name, opts)
		if err != nil {
			return err
		}
		defer d.Stop(10 * time.Second)
		daemons[i] = d
		fmt.Printf("  gmigd %s: run dir %s, migrations on %s\n", name, d.RunDir, d.Addr)
	}
	a, b := daemons[0], daemons[1]
	// A neighbour on host A first, so the VM's vGPU lands at another pool
	// offset there than on B: the remapping is real.
	if _, err := a.Client.Create(hostd.CreateRequest{Name: "neighbour", MemSize: demoNeighbourMem}); err != nil {
		return err
	}
	c := demoCluster{a: a, b: b, accel: accel, kernel: kernel, initrd: initrd}
	if q.program != "" {
		return q.runProgram(ctx, c)
	}
	return q.runWorkload(ctx, c)
}

// guestImage is the guest's kernel and initramfs: the cache's, or -initrd's
// initramfs; both must exist.
func (q *qemuDemo) guestImage() (kernel, initrd string, err error) {
	kernel, initrd = filepath.Join(q.cache, "guest", "vmlinuz"), filepath.Join(q.cache, "guest", "initramfs.cpio")
	if _, err := os.Stat(kernel); err != nil {
		return "", "", fmt.Errorf("guest image: %w (run `make guest-image`)", err)
	}
	if q.initrd == "" {
		if _, err := os.Stat(initrd); err != nil {
			return "", "", fmt.Errorf("guest image: %w (run `make guest-image`)", err)
		}
		return kernel, initrd, nil
	}
	if _, err := os.Stat(q.initrd); err != nil {
		return "", "", fmt.Errorf("-initrd: %w", err)
	}
	return kernel, q.initrd, nil
}

// demoNeighbourMem is the neighbour vGPU's graphics memory: the smallest
// the pool's alignment leaves room for beside the demo's.
const demoNeighbourMem = 16 << 20

// poolSize is the daemons' -pool: the neighbour and two of the VM's vGPU
// (B holds the arriving one and, with -cuda-program, the reference run's)
// with their local memory, at least the 256 MiB the demo always had.
func (q *qemuDemo) poolSize() string {
	need := demoNeighbourMem + 2*(q.mem+q.localMem)
	return fmt.Sprintf("%dM", max(need>>20+1, 256))
}

// pickAccel resolves -accel: auto is qemu.DefaultAccel's choice; kvm must
// be usable.
func pickAccel(want string) (accel, why string, err error) {
	switch want {
	case "", "auto":
		accel, why = qemu.DefaultAccel()
		return accel, why, nil
	case "kvm":
		if err := qemu.CheckKVM(); err != nil {
			return "", "", fmt.Errorf("-accel kvm: %w", err)
		}
		return "kvm", "-accel kvm", nil
	case "tcg":
		return "tcg", "-accel tcg", nil
	}
	return "", "", fmt.Errorf("-accel %q: want auto, kvm or tcg", want)
}

// vmRequest is the request that starts VM name with the demo's vGPU.
func (q *qemuDemo) vmRequest(name string, spec qemu.Spec) hostd.StartVMRequest {
	return hostd.StartVMRequest{Name: name, MemSize: q.mem, Backend: q.backend, GuestModules: q.guestModules,
		LocalMemSize: q.localMem, QEMU: spec}
}

// runWorkload is the demo proper: gmig-guest's suite and seeded workload,
// migrated a quarter of the way through, its digest against a run never
// migrated.
func (q *qemuDemo) runWorkload(ctx context.Context, c demoCluster) error {
	a, b, accel, kernel, initrd := c.a, c.b, c.accel, c.kernel, c.initrd
	steps := q.steps
	migrateAt := steps / 4
	spec := qemu.Spec{
		Machine: q.machine, MemoryMB: q.ramMB, CPUs: q.cpus, Accel: accel, Kernel: kernel, Initrd: initrd,
		Append: fmt.Sprintf("console=ttyS0 panic=-1 quiet gmig.measure=0 gmig.steps=%d gmig.seed=%d gmig.check=true gmig.progress=%d",
			steps, q.seed, max(steps/20, 1)),
	}
	if q.fps > 0 {
		// Pacing changes when the steps run, not what they write: the
		// digest is the unpaced reference's.
		spec.Append += fmt.Sprintf(" gmig.workload=mixed,fps=%d", q.fps)
	}
	vm, err := a.Client.StartVM(q.vmRequest("demo", spec))
	if err != nil {
		return err
	}
	fmt.Printf("VM %q started on A (QEMU pid %d, %s machine, %d MiB vGPU); booting Linux, then the guest runs its suite and the workload\n",
		vm.Name, vm.PID, q.machine, q.mem>>20)
	want := make(chan [32]byte, 1)
	go func() {
		d, err := inproc.ReferenceDigest(ctx, q.mem, 0, q.seed, guest.WorkloadConfig{}, steps, q.log)
		if err != nil {
			q.log.Error().Err(err).Msg("reference run")
		}
		want <- d
	}()
	bootCtx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	con := cluster.Follow(a.Console("demo"))
	defer con.Close()
	for range 2 {
		m, err := con.Wait(bootCtx, reSuite)
		if err != nil {
			return err
		}
		fmt.Printf("guest: correctness suite (%s): %s\n", m[1], m[2])
	}
	for {
		m, err := con.Wait(bootCtx, reStep)
		if err != nil {
			return err
		}
		if n, _ := strconv.Atoi(m[1]); n >= migrateAt {
			fmt.Printf("guest: workload at step %d of %d (self-checking, 1 ms heartbeat)\n", n, steps)
			break
		}
	}
	fmt.Printf("gmigd migrate demo --to %s (%s)\n", b.Addr, q.strategy)
	pp := newProgressPrinter(os.Stdout, q.json, term.IsTerminal(int(os.Stdout.Fd())))
	rep, err := a.Client.Migrate(ctx, "demo", hostd.MigrateRequest{To: b.Addr, Strategy: string(q.strategy), NoTracking: q.noTracking}, pp.show)
	pp.done()
	if err != nil {
		return err
	}
	fmt.Println()
	fmt.Print(indent(rep.String(), "  "))
	fmt.Println()
	conB := cluster.Follow(b.Console("demo"))
	defer conB.Close()
	dig, err := conB.Wait(bootCtx, reDigestOrFail)
	if err != nil {
		return err
	}
	res, err := conB.Wait(bootCtx, reResult)
	if err != nil {
		return err
	}
	ref := <-want
	fmt.Printf("guest on B: result %s (its own checks of graphics memory and DMA after every step)\n", res[1])
	if res[1] != "ok" || dig[1] == "" {
		return fmt.Errorf("the guest reported a failure after the migration: %s", dig[2])
	}
	verdict := "equals a never-migrated run of the same seed: ok"
	if dig[1] != hex.EncodeToString(ref[:]) {
		verdict = "DIFFERS from the never-migrated run " + hex.EncodeToString(ref[:8])
	}
	fmt.Printf("guest on B: workload digest %s %s\n", dig[1][:16], verdict)
	if dig[1] != hex.EncodeToString(ref[:]) {
		return errors.New("digest mismatch after migration")
	}
	return nil
}

func (q *qemuDemo) logLevel() string {
	return q.log.GetLevel().String()
}
