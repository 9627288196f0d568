package main

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/internal/vgpu"
	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/precopy"
)

// benchConfig is what gmigd bench runs: every strategy on the same seeded
// workload, paused at the same operation.
type benchConfig struct {
	mem, wmem  uint64
	fill       float64
	steps      int
	seed       int64
	strategies []precopy.Strategy
	runs       int
	bgRate     int
	workers    int
	log        zerolog.Logger
	out        io.Writer
}

// cmdBench compares the migration strategies on one seeded workload: for
// each, a fresh pair of hosts (pools) and vGPUs, the workload running on
// the built-in simulator, pre-copy while it runs, the stop at the same
// operation, migration over loopback TCP, and the workload finishing on
// the destination with the digest of a run that was never migrated.
func cmdBench(args []string) error {
	c := benchConfig{out: os.Stdout}
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	mem, wmem := byteSize(64<<20), byteSize(0)
	fs.Var(&mem, "mem", "the vGPU's graphics memory")
	fs.Var(&wmem, "workload-mem", "graphics memory the workload uses (default half of -mem)")
	fs.Float64Var(&c.fill, "fill", 0.75, "fraction of graphics pages holding seeded data before the guest starts (textures, buffers)")
	fs.IntVar(&c.steps, "steps", 1000, "workload steps: pre-copy starts at a quarter, the VM stops in the middle")
	fs.Int64Var(&c.seed, "seed", 1, "workload seed (also picks the operation the VM stops at)")
	strategies := fs.String("strategies", "oneshot,iterative,stopcopy", "strategies to compare, comma-separated")
	fs.IntVar(&c.runs, "runs", 1, "runs per strategy")
	fs.IntVar(&c.bgRate, "background-rate", 0, "oneshot: background re-hash budget in pages/s between pre-copy and stop")
	fs.IntVar(&c.workers, "workers", 0, "hashing workers (default GOMAXPROCS)")
	logLevel := fs.String("log-level", "warn", "gmigd log level")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if c.log, err = newLogger(*logLevel); err != nil {
		return err
	}
	c.mem, c.wmem = uint64(mem), uint64(wmem)
	if c.wmem == 0 {
		c.wmem = c.mem / 2
	}
	for _, s := range strings.Split(*strategies, ",") {
		st, err := precopy.ParseStrategy(strings.TrimSpace(s))
		if err != nil {
			return err
		}
		c.strategies = append(c.strategies, st)
	}
	if c.steps < 4 || c.runs < 1 || c.fill < 0 || c.fill > 1 {
		return fmt.Errorf("want -steps ≥ 4, -runs ≥ 1 and -fill in [0, 1]")
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return c.run(ctx)
}

// benchRun is one migration's outcome.
type benchRun struct {
	strategy precopy.Strategy
	rep      orchestrator.Report
}

func (c *benchConfig) run(ctx context.Context) error {
	startAt, pauseAt := uint64(c.steps/4), uint64(c.steps/2)
	pauseOp := 1 + rand.New(rand.NewPCG(uint64(c.seed), 0x7061757365)).IntN(6) // "pause"
	fmt.Fprintf(c.out, "gmigd bench: %d MiB vGPU (%.0f%% of pages hold data), workload on %d MiB, seed %d, %d steps; pre-copy from step %d; the workload waits at operation %d of step %d, where the VM pauses once the live phase has ended; %d hashing workers; two gmigd in this process, loopback TCP\n",
		c.mem>>20, 100*c.fill, c.wmem>>20, c.seed, c.steps, startAt, pauseOp, pauseAt, c.workerCount())
	t := time.Now()
	want, err := referenceDigest(ctx, c.mem, c.fill, c.seed, c.workload(), c.steps, c.log)
	if err != nil {
		return err
	}
	fmt.Fprintf(c.out, "reference (never migrated): digest %s in %s\n", hex.EncodeToString(want[:8]), time.Since(t).Round(time.Millisecond))
	var runs []benchRun
	for _, st := range c.strategies {
		for r := 1; r <= c.runs; r++ {
			fmt.Fprintf(c.out, "[%s run %d]", st, r)
			rep, got, err := c.migrateOnce(ctx, st, startAt, pauseAt, pauseOp)
			if err != nil {
				fmt.Fprintln(c.out)
				return fmt.Errorf("%s run %d: %w", st, r, err)
			}
			if got != want {
				fmt.Fprintln(c.out)
				return fmt.Errorf("%s run %d: digest %x, reference %x", st, r, got, want)
			}
			fmt.Fprintf(c.out, " pre-copy %.0f ms (%d pages, %.1f MiB); downtime %.2f ms (guest saw %.2f ms), %d pages at the stop; digest ok\n",
				ms(rep.Precopy.Precopy.Duration), rep.Precopy.Precopy.Pages, mibs(rep.Precopy.Precopy.Bytes),
				ms(rep.Downtime), ms(rep.GuestGap), rep.Precopy.Stop.DirtyPages)
			runs = append(runs, benchRun{st, rep})
		}
	}
	c.table(runs)
	return nil
}

func (c *benchConfig) workload() guest.WorkloadConfig { return guest.WorkloadConfig{MemSize: c.wmem} }

func (c *benchConfig) workerCount() int {
	if c.workers > 0 {
		return c.workers
	}
	return runtime.GOMAXPROCS(0)
}

// migrateOnce runs the workload on a fresh source host to step startAt,
// migrates it with strategy st to a fresh destination host through the
// orchestrator — the workload running during the live phase and waiting
// at the fixed operation until the VM pauses — lets it finish there and
// returns the report and the final digest.
func (c *benchConfig) migrateOnce(ctx context.Context, st precopy.Strategy, startAt, pauseAt uint64, pauseOp int) (orchestrator.Report, [32]byte, error) {
	var rep orchestrator.Report
	var sum [32]byte
	p, err := newInProc(2*c.mem+(8<<20), c.log, nil)
	if err != nil {
		return rep, sum, err
	}
	defer p.close()
	// A neighbour on the source host, so the vGPU sits at a different pool
	// offset on each side and the remapping is real.
	if _, err := p.hosts[0].Create(vgpu.Config{Name: "neighbour", MemSize: 1 << 20}); err != nil {
		return rep, sum, err
	}
	hold := func(vm *sim.VM) (<-chan struct{}, error) { return vm.HoldAt(pauseAt, pauseOp) }
	vm, _, err := p.startVM(p.hosts[0], "bench", c.mem, c.fill, c.seed, c.workload(), hold)
	if err != nil {
		return rep, sum, err
	}
	defer vm.Close()
	stopBeat := vm.StartHeartbeat(time.Millisecond)
	defer stopBeat()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	paced := vm.Pace(startAt)
	go func() { done <- vm.Run(ctx, c.steps) }()
	select {
	case <-paced:
	case err := <-done:
		return rep, sum, fmt.Errorf("the workload ended (%v) before the migration", err)
	}
	rep, err = p.migrate(ctx, 0, "bench", hostd.MigrateOptions{
		Precopy: precopy.Options{Strategy: st, BackgroundRate: c.bgRate, Workers: c.workers},
		Progress: func(pr orchestrator.Progress) {
			if pr.Phase == orchestrator.PhaseVGPULive {
				vm.Pace(0)
			}
		},
	})
	if err != nil {
		cancel()
		vm.Resume()
		<-done
		return rep, sum, err
	}
	if err := <-done; err != nil {
		return rep, sum, fmt.Errorf("workload after the migration: %w", err)
	}
	sum, err = vm.Digest()
	return rep, sum, err
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mibs(n uint64) float64 { return float64(n) / (1 << 20) }

// termColumns are the downtime's terms as the table shows them.
var termColumns = []struct{ head, term string }{
	{"pause", orchestrator.TermPause}, {"quiesce", orchestrator.TermQuiesce}, {"scan", orchestrator.TermScan},
	{"transfer", orchestrator.TermTransfer}, {"restore", orchestrator.TermRestore}, {"replay", orchestrator.TermReplay},
	{"tail", orchestrator.TermVerdict}, {"vmm", orchestrator.TermSwitchover}, {"commit", orchestrator.TermCommit},
	{"load", orchestrator.TermLoad}, {"front", orchestrator.TermFrontEnd}, {"record", orchestrator.TermRecord}, {"engine", orchestrator.TermEngine},
	{"resume", orchestrator.TermResume},
}

// table prints one row per run, a mean row per strategy when there are
// several runs, and the means' ratios against stop-and-copy.
func (c *benchConfig) table(runs []benchRun) {
	fmt.Fprintf(c.out, "\ndowntime = pause -> resume on the host clock, split into its consecutive terms; guest = largest guest heartbeat gap; times in ms; pages and MiB sent; dirty pages at the stop by source:\n")
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	head := "strategy\trun\tdowntime\tguest\t"
	for _, tc := range termColumns {
		head += tc.head + "\t"
	}
	fmt.Fprintln(tw, head+"pre pages\tpre MiB\tstop pages\tstop MiB\tengine\tbackgr\tsample\thash\tunrec\thashed\tscan GB/s\t")
	row := func(name, run string, r orchestrator.Report) {
		line := fmt.Sprintf("%s\t%s\t%.2f\t%.2f\t", name, run, ms(r.Downtime), ms(r.GuestGap))
		for _, tc := range termColumns {
			line += fmt.Sprintf("%.2f\t", ms(r.Term(tc.term)))
		}
		p, s := r.Precopy.Precopy, r.Precopy.Stop
		b := s.BySource
		line += fmt.Sprintf("%d\t%.2f\t%d\t%.2f\t%d\t%d\t%d\t%d\t%d\t%d\t%.2f\t",
			p.Pages, mibs(p.Bytes), s.DirtyPages, mibs(s.Bytes),
			b[dirty.Engine], b[dirty.Background], b[dirty.Sample], b[dirty.Hash], b[dirty.Unrecorded],
			s.PagesHashed, r.Precopy.HashRate/1e9)
		fmt.Fprintln(tw, line)
	}
	means := map[precopy.Strategy]orchestrator.Report{}
	for _, st := range c.strategies {
		var group []orchestrator.Report
		for _, r := range runs {
			if r.strategy == st {
				row(string(st), fmt.Sprint(len(group)+1), r.rep)
				group = append(group, r.rep)
			}
		}
		means[st] = mean(group)
		if len(group) > 1 {
			row(string(st), "mean", means[st])
		}
	}
	tw.Flush()
	fmt.Fprintf(c.out, "hash throughput of this machine: %.2f GB/s (dirty.MeasureHashRate, 64 MiB, %d workers)\n",
		dirty.MeasureHashRate(make([]byte, 64<<20), c.workers)/1e9, c.workerCount())
	base, ok := means[precopy.StopCopy]
	if !ok || base.Downtime == 0 {
		return
	}
	fmt.Fprintf(c.out, "\nratios vs stopcopy (means):\n")
	tw = tabwriter.NewWriter(c.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tdowntime\tguest gap\tstop pages\tstop bytes\tall bytes sent\t")
	for _, st := range c.strategies {
		m := means[st]
		ms, bs := m.Precopy.Stop, base.Precopy.Stop
		fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%.3f\t%.3f\t%.3f\t\n", st,
			float64(m.Downtime)/float64(base.Downtime),
			float64(m.GuestGap)/float64(max(base.GuestGap, 1)),
			float64(ms.DirtyPages)/float64(max(bs.DirtyPages, 1)),
			float64(ms.Bytes)/float64(max(bs.Bytes, 1)),
			float64(ms.Bytes+m.Precopy.Precopy.Bytes)/float64(max(bs.Bytes+base.Precopy.Precopy.Bytes, 1)))
	}
	tw.Flush()
}

// mean averages reports field by field: the downtime, the guest gap, each
// term, and the vGPU's pages and bytes (the first report's other fields).
func mean(rs []orchestrator.Report) orchestrator.Report {
	if len(rs) <= 1 {
		if len(rs) == 0 {
			return orchestrator.Report{}
		}
		return rs[0]
	}
	m := rs[0]
	n := len(rs)
	m.Terms = append([]orchestrator.Term(nil), rs[0].Terms...)
	m.Downtime, m.GuestGap = 0, 0
	for i := range m.Terms {
		m.Terms[i].D = 0
	}
	var pre, stop precopy.Report
	for _, r := range rs {
		m.Downtime += r.Downtime / time.Duration(n)
		m.GuestGap += r.GuestGap / time.Duration(n)
		for i := range m.Terms {
			m.Terms[i].D += r.Term(m.Terms[i].Name) / time.Duration(n)
		}
		pre.Precopy.Duration += r.Precopy.Precopy.Duration / time.Duration(n)
		pre.Precopy.Pages += r.Precopy.Precopy.Pages / uint64(n)
		pre.Precopy.Bytes += r.Precopy.Precopy.Bytes / uint64(n)
		stop.Stop.DirtyPages += r.Precopy.Stop.DirtyPages / n
		stop.Stop.PagesHashed += r.Precopy.Stop.PagesHashed / n
		stop.Stop.Bytes += r.Precopy.Stop.Bytes / uint64(n)
		for i := range stop.Stop.BySource {
			stop.Stop.BySource[i] += r.Precopy.Stop.BySource[i] / n
		}
		stop.HashRate += r.Precopy.HashRate / float64(n)
	}
	m.Precopy.Precopy.Duration, m.Precopy.Precopy.Pages, m.Precopy.Precopy.Bytes = pre.Precopy.Duration, pre.Precopy.Pages, pre.Precopy.Bytes
	m.Precopy.Stop.DirtyPages, m.Precopy.Stop.PagesHashed, m.Precopy.Stop.Bytes = stop.Stop.DirtyPages, stop.Stop.PagesHashed, stop.Stop.Bytes
	m.Precopy.Stop.BySource, m.Precopy.HashRate = stop.Stop.BySource, stop.HashRate
	return m
}
