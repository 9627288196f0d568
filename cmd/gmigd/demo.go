package main

import (
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/internal/inproc"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/precopy"
	"github.com/gmig-dev/gmig/vgpu"
)

// demo is `gmigd demo -sim`: two gmigd hosts in one process, a vGPU on the
// first driven by the built-in guest simulator, a live migration to the
// second through the orchestrator while the guest runs, and the downtime
// report. (Without -sim the demo migrates a real Linux VM under QEMU:
// demo_qemu.go.)
type demo struct {
	mem      uint64
	wmem     uint64
	steps    int
	at       int
	seed     int64
	strategy precopy.Strategy
	suite    bool
	json     bool
	log      zerolog.Logger
}

func cmdDemo(args []string) error {
	var d demo
	var q qemuDemo
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	simMode := fs.Bool("sim", false, "in-process: the built-in guest simulator instead of a Linux VM under QEMU")
	mem := byteSize(64 << 20)
	fs.Var(&mem, "mem", "the migrated vGPU's graphics memory")
	wmem := byteSize(16 << 20)
	fs.Var(&wmem, "workload-mem", "-sim: graphics memory the guest's workload keeps rewriting")
	fs.IntVar(&d.steps, "steps", 600, "workload steps in all")
	fs.IntVar(&d.at, "at", 300, "-sim: workload step at which the migration starts")
	fs.Int64Var(&d.seed, "seed", 1, "workload seed")
	strategy := fs.String("strategy", string(precopy.OneShot), "pre-copy strategy: oneshot, iterative or stopcopy")
	fs.BoolVar(&d.suite, "suite", true, "-sim: run the correctness suite on a scratch vGPU first")
	fs.BoolVar(&d.json, "json", false, "progress as JSON lines")
	logLevel := fs.String("log-level", "warn", "gmigd log level")
	q.flags(fs)
	if _, err := parseN(fs, args); err != nil {
		return err
	}
	var err error
	if d.strategy, err = precopy.ParseStrategy(*strategy); err != nil {
		return err
	}
	d.mem, d.wmem = uint64(mem), uint64(wmem)
	if d.log, err = newLogger(*logLevel); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if !*simMode {
		q.demo = d
		return q.run(ctx)
	}
	if q.program != "" {
		return badUsage(fs, "-cuda-program runs in a VM under QEMU, not with -sim")
	}
	if d.at <= 0 || d.at >= d.steps {
		return fmt.Errorf("-at %d must be within (0, -steps %d)", d.at, d.steps)
	}
	return d.run(ctx)
}

// demoFill is the fraction of the vGPU's pages holding data before the
// guest starts (textures, buffers).
const demoFill = 0.75

func (d *demo) run(ctx context.Context) error {
	var beats beatCounter
	p, err := inproc.New(2*d.mem+32<<20, d.log, beats.record)
	if err != nil {
		return err
	}
	defer p.Close()
	a := p.Hosts[0]
	// A neighbour on host A, so the migrated vGPU's pool offset differs
	// between the hosts and remapping is real.
	if _, err := a.Create(vgpu.Config{Name: "neighbour", MemSize: 16 << 20}); err != nil {
		return err
	}
	fmt.Printf("gmigd demo: two gmigd hosts in this process, migrations over loopback TCP (A %s, B %s)\n", a.Addr, p.Hosts[1].Addr)
	if d.suite {
		if err := d.runSuite(a); err != nil {
			return err
		}
	}
	wcfg := guest.WorkloadConfig{MemSize: d.wmem}
	want, err := inproc.ReferenceDigest(ctx, d.mem, demoFill, d.seed, wcfg, d.steps, d.log)
	if err != nil {
		return err
	}
	vm, info, err := p.StartVM(a, vgpu.Config{Name: "demo", MemSize: d.mem}, demoFill, d.seed, wcfg, nil)
	if err != nil {
		return err
	}
	defer vm.Close()
	fmt.Printf("vGPU %q: %d MiB on host A at pool offset %#x, %.0f%% of its pages holding data\n", info.Name, info.MemSize>>20, info.PoolOffset, 100*demoFill)
	stopBeat := vm.StartHeartbeat(time.Millisecond)
	defer stopBeat()
	done := make(chan error, 1)
	t0 := time.Now()
	paced := vm.Pace(uint64(d.at))
	go func() { done <- vm.Run(ctx, d.steps) }()
	fmt.Printf("guest: seeded workload (seed %d), %d steps over %d MiB of graphics memory, running\n", d.seed, d.steps, d.wmem>>20)
	select {
	case <-paced:
	case err := <-done:
		return fmt.Errorf("the workload ended before step %d: %v", d.at, err)
	}
	fmt.Printf("step %d: live migration A -> B (%s): the vGPU pre-copies while the guest runs, then the VM pauses for the stop phase\n", d.at, d.strategy)
	pp := newProgressPrinter(os.Stdout, d.json, false)
	rep, err := p.Migrate(ctx, 0, "demo", hostd.MigrateOptions{
		Precopy: precopy.Options{Strategy: d.strategy},
		Progress: func(pr orchestrator.Progress) {
			if pr.Phase == orchestrator.PhaseVGPULive {
				vm.Pace(0) // the guest runs on during the live phase
			}
			pp.show(pr)
		},
	})
	pp.done()
	if err != nil {
		return err
	}
	arrived, err := p.Hosts[1].Get("demo")
	if err != nil {
		return err
	}
	fmt.Printf("the VM runs on host B; its vGPU sits at pool offset %#x there\n\n", arrived.PoolOffset)
	fmt.Print(indent(rep.String(), "  "))
	fmt.Println()
	if err := <-done; err != nil {
		return fmt.Errorf("workload after the migration: %w", err)
	}
	stopBeat()
	got, err := vm.Digest()
	if err != nil {
		return err
	}
	verdict := "equals a never-migrated run of the same seed: ok"
	if got != want {
		verdict = "DIFFERS from the never-migrated run " + hex.EncodeToString(want[:8])
	}
	fmt.Printf("workload finished on host B in %s (%d heartbeats seen by the hosts); digest %s %s\n",
		time.Since(t0).Round(time.Millisecond), beats.count(), hex.EncodeToString(got[:8]), verdict)
	if got != want {
		return errors.New("digest mismatch after migration")
	}
	return nil
}

// beatCounter counts the guest heartbeats both hosts saw.
type beatCounter struct {
	mu sync.Mutex
	n  int
}

func (b *beatCounter) record(_, _ string, _ uint64, _ time.Time) {
	b.mu.Lock()
	b.n++
	b.mu.Unlock()
}

func (b *beatCounter) count() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.n
}

// runSuite checks the device with the correctness suite on a scratch vGPU.
func (d *demo) runSuite(h *inproc.Host) error {
	info, err := h.Create(vgpu.Config{Name: "suite", MemSize: 16 << 20})
	if err != nil {
		return err
	}
	defer h.Destroy("suite")
	bus, err := sim.Attach(info.Socket, sim.Options{MSI: true})
	if err != nil {
		return err
	}
	defer bus.Close()
	drv, err := guest.Open(bus, guest.Options{Seed: d.seed, UseIRQ: true})
	if err != nil {
		return err
	}
	r := guest.Suite(context.Background(), drv)
	lines := strings.Split(strings.TrimSpace(r.String()), "\n")
	fmt.Printf("correctness suite on a scratch vGPU: %s\n", lines[len(lines)-1])
	if !r.OK() {
		fmt.Print(r)
		return fmt.Errorf("%d suite checks failed", len(r.Failed()))
	}
	return nil
}

func indent(s, pre string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return pre + strings.Join(lines, "\n"+pre) + "\n"
}
