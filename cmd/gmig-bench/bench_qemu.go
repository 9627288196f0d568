package main

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/hostd/qemu"
	"github.com/gmig-dev/gmig/internal/cluster"
	"github.com/gmig-dev/gmig/internal/cmdline"
	"github.com/gmig-dev/gmig/vgpu"
)

// qemuBenchConfig is the real-VM matrix: two gmigd daemons as processes
// (internal/cluster), a Linux guest under QEMU running the in-guest
// program's workload profile (gmig.workload=...), migrated through the
// daemons' API exactly as `gmigd migrate` does. Under TCG a guest is slow:
// the matrix stays small.
type qemuBenchConfig struct {
	mems     []uint64
	profiles []guest.WorkloadConfig
	cache    string
	gmigd    string // the gmigd binary the daemons run
	machine  string
	ramMB    int
	warmup   time.Duration
	budget   time.Duration // guest time the workload runs past the warm-up
	memsFlag string
	profFlag string
}

func (q *qemuBenchConfig) flags(fs *flag.FlagSet) {
	fs.StringVar(&q.memsFlag, "qemu-mems", "256M,1G", "-qemu: vGPU sizes")
	fs.StringVar(&q.profFlag, "qemu-profiles", "render", "-qemu: workload profiles")
	fs.StringVar(&q.cache, "cache", cmdline.DefaultCache(), "-qemu: the provisioned QEMU root and guest image (make provision guest-image)")
	fs.StringVar(&q.gmigd, "gmigd", "", "-qemu: the gmigd binary the two daemons run (default: gmigd beside this program, as make build puts them)")
	fs.StringVar(&q.machine, "machine", "pc", "-qemu: QEMU machine type: pc or q35")
	fs.IntVar(&q.ramMB, "qemu-ram", 512, "-qemu: guest RAM in MiB")
	fs.DurationVar(&q.warmup, "qemu-warmup", 3*time.Second, "-qemu: guest time of workload before the migration starts")
	fs.DurationVar(&q.budget, "qemu-budget", 40*time.Second, "-qemu: guest time the workload runs after the warm-up (the migration must fit; the digest comes at its end)")
}

// gmigdBinary is -gmigd, or gmigd beside this program.
func (q *qemuBenchConfig) gmigdBinary() (string, error) {
	if q.gmigd != "" {
		return q.gmigd, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding gmigd beside this program: %w", err)
	}
	p := filepath.Join(filepath.Dir(self), "gmigd")
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("no gmigd beside this program (make build, or -gmigd): %w", err)
	}
	return p, nil
}

// parse reads -qemu-mems and -qemu-profiles. The in-guest program runs
// guest workload profiles only: the dirty profile is refused.
func (q *qemuBenchConfig) parse() error {
	var err error
	if q.mems, err = parseSizes(q.memsFlag); err != nil {
		return fmt.Errorf("gmig-bench: -qemu-mems: %w", err)
	}
	if strings.Contains(q.profFlag, burstProfile) {
		return fmt.Errorf("gmig-bench: -qemu-profiles %q: the %s profile runs in process only (use cpu:mem=SIZE:rate=R for the same dirty bytes)", q.profFlag, burstProfile)
	}
	if q.profiles, err = parseProfiles(q.profFlag); err != nil {
		return fmt.Errorf("gmig-bench: -qemu-profiles: %w", err)
	}
	return nil
}

// cases is the real-VM matrix.
func (q *qemuBenchConfig) cases(c *benchConfig) []benchCase {
	var out []benchCase
	for _, p := range q.profiles {
		for _, m := range q.mems {
			w := c.workload(p)
			out = append(out, benchCase{Mode: "qemu", Sweep: "qemu", Workload: w.Spec(), Mem: m, cfg: w})
		}
	}
	return out
}

// Console lines of cmd/gmig-guest the real-VM bench follows.
var (
	reBenchStep   = regexp.MustCompile(`gmig: workload step (\d+)\b`)
	reBenchDigest = regexp.MustCompile(`gmig: workload(?: seed=\d+ steps=\d+ in \S+ digest=([0-9a-f]{64})|: (.*))`)
)

// runQEMUCase starts two daemons and migrates the case's VM once per
// strategy (and run), each time from a freshly booted guest at the same
// workload step.
func (c *benchConfig) runQEMUCase(ctx context.Context, bc benchCase, n *int, total int) ([]benchResult, error) {
	q := &c.qemuCfg
	root := qemu.Root(filepath.Join(q.cache, "qemu-root"))
	kernel, initrd := filepath.Join(q.cache, "guest", "vmlinuz"), filepath.Join(q.cache, "guest", "initramfs.cpio")
	if err := root.Check(); err != nil {
		return nil, fmt.Errorf("%w (make provision guest-image)", err)
	}
	fps := fpsOf(bc.cfg)
	warm := uint64(q.warmup.Seconds() * fps)
	progress := max(1, uint64(fps/4))
	tl := benchTimeline{StartAt: warm, Steps: int(warm + uint64(q.budget.Seconds()*fps))}
	c.statusf("== %s: rates, reference digest (%d steps), two gmigd daemons\n", bc, tl.Steps)
	rates, err := measureRates(c.workerCount())
	if err != nil {
		return nil, err
	}
	want, err := references.get(ctx, c, bc.cfg, tl.Steps)
	if err != nil {
		return nil, err
	}
	gmigd, err := c.qemuCfg.gmigdBinary()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "gmig-bench-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	pool := strconv.FormatUint((bc.Mem+(64<<20))>>20, 10) + "M"
	var daemons [2]*cluster.Daemon
	for i, name := range []string{"a", "b"} {
		d, err := cluster.Start(ctx, dir, name, benchDaemonOptions(gmigd, string(root), pool, c.log.GetLevel().String()))
		if err != nil {
			return nil, err
		}
		defer d.Stop(10 * time.Second)
		daemons[i] = d
	}
	a, b := daemons[0], daemons[1]
	if _, err := a.Client.Create(hostd.CreateRequest{Name: "neighbour", MemSize: 16 << 20}); err != nil {
		return nil, err
	}
	accel, _ := qemu.DefaultAccel()
	spec := qemu.Spec{
		Machine: q.machine, MemoryMB: q.ramMB, CPUs: 2, Accel: accel, Kernel: kernel, Initrd: initrd,
		Append: fmt.Sprintf("console=ttyS0 panic=-1 quiet gmig.measure=0 gmig.suite=false gmig.check=false gmig.steps=%d gmig.seed=%d gmig.progress=%d gmig.workload=%s",
			tl.Steps, c.seed, progress, bc.cfg.Spec()),
	}
	var out []benchResult
	for _, v := range c.variants() {
		if v.Serial {
			continue // the daemons' API has no serial stop phase
		}
		for r := 1; r <= c.runs; r++ {
			*n++
			c.statusf("[%d/%d] %s, %s run %d: boot, warm-up to step %d, gmigd migrate ...\n", *n, total, bc, v, r, warm)
			res, err := c.migrateQEMU(ctx, bc, v, tl, spec, a, b, progress, want)
			res.Run, res.Rates = r, rates
			res.finish()
			out = append(out, res)
			if err != nil {
				return out, fmt.Errorf("%s run %d: %w (logs: %s)", v, r, err, dir)
			}
			c.statusf("    %s\n", res.summary())
		}
	}
	return out, nil
}

// benchDaemonOptions start the real-VM bench's daemons: its vGPUs are
// software ones, so on a host with a GPU the two daemons run without one
// (cluster.BackendFlags) rather than both reaching for its lock.
func benchDaemonOptions(gmigd, root, pool, logLevel string) cluster.Options {
	return cluster.Options{Binary: gmigd, QEMURoot: root, Pool: pool, LogLevel: logLevel,
		Extra: cluster.BackendFlags(vgpu.BackendSoftware)}
}

// migrateQEMU boots the VM on a, waits for the workload's step
// tl.StartAt, migrates it to b through a's API, and checks the digest
// the guest prints at its end on b.
func (c *benchConfig) migrateQEMU(ctx context.Context, bc benchCase, v benchVariant, tl benchTimeline, spec qemu.Spec,
	a, b *cluster.Daemon, progress uint64, want [32]byte) (benchResult, error) {
	res := benchResult{Case: bc, Variant: v.String(), Strategy: v.Strategy, Timeline: tl, FullHash: v.FullHash,
		RateAsked: float64(bc.cfg.StepPages()) * fpsOf(bc.cfg) / 256}
	_ = os.Remove(a.Console("bench"))
	_ = os.Remove(b.Console("bench"))
	if _, err := a.Client.StartVM(hostd.StartVMRequest{Name: "bench", MemSize: bc.Mem, QEMU: spec}); err != nil {
		return res, err
	}
	defer func() { _ = b.Client.StopVM("bench") }()
	bootCtx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	con := cluster.Follow(a.Console("bench"))
	defer con.Close()
	var first, last struct {
		step uint64
		at   time.Time
	}
	for {
		m, err := con.Wait(bootCtx, reBenchStep)
		if err != nil {
			_ = a.Client.StopVM("bench")
			return res, err
		}
		s, _ := strconv.ParseUint(m[1], 10, 64)
		if first.at.IsZero() && s > 0 {
			first.step, first.at = s, time.Now()
		}
		last.step, last.at = s, time.Now()
		if s >= tl.StartAt {
			break
		}
	}
	if d := last.at.Sub(first.at); d > 0 {
		res.RateAchieved = float64(last.step-first.step) * float64(bc.cfg.StepPages()) / 256 / d.Seconds()
	}
	rep, err := a.Client.Migrate(ctx, "bench", hostd.MigrateRequest{To: b.Addr, Strategy: string(v.Strategy), BackgroundRate: c.bgRate, NoTracking: v.FullHash}, nil)
	res.setReport(rep)
	if err != nil {
		_ = a.Client.StopVM("bench")
		return res, err
	}
	conB := cluster.Follow(b.Console("bench"))
	defer conB.Close()
	dig, err := conB.Wait(bootCtx, reBenchDigest)
	if err != nil {
		return res, err
	}
	if dig[1] == "" {
		return res, fmt.Errorf("the guest failed after the migration: %s", dig[2])
	}
	res.DigestOK = dig[1] == hex.EncodeToString(want[:])
	if !res.DigestOK {
		return res, fmt.Errorf("guest digest %s, reference %s", dig[1][:16], hex.EncodeToString(want[:8]))
	}
	_ = progress
	return res, nil
}
