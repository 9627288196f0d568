package main

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/internal/vgpu"
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
	rep      precopy.Report
}

func (c *benchConfig) run(ctx context.Context) error {
	startAt, pauseAt := uint64(c.steps/4), uint64(c.steps/2)
	pauseOp := 1 + rand.New(rand.NewPCG(uint64(c.seed), 0x7061757365)).IntN(6) // "pause"
	fmt.Fprintf(c.out, "gmigd bench: %d MiB vGPU (%.0f%% of pages hold data), workload on %d MiB, seed %d, %d steps; pre-copy from step %d, VM stops at operation %d of step %d; %d hashing workers; loopback TCP\n",
		c.mem>>20, 100*c.fill, c.wmem>>20, c.seed, c.steps, startAt, pauseOp, pauseAt, c.workerCount())
	t := time.Now()
	want, err := c.reference(ctx)
	if err != nil {
		return fmt.Errorf("reference run: %w", err)
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
			fmt.Fprintf(c.out, " stop %.2f ms, %d pages at stop; digest ok\n", ms(rep.Stop.Total), rep.Stop.DirtyPages)
			runs = append(runs, benchRun{st, rep})
		}
	}
	c.table(runs)
	return nil
}

// host is one side: a pool, and the directory its sockets live in.
type benchHost struct {
	pool *pool.Pool
	dir  string
}

func newBenchHost(size uint64) (*benchHost, error) {
	p, err := pool.New(size)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "gmig-bench-")
	if err != nil {
		p.Close()
		return nil, err
	}
	return &benchHost{pool: p, dir: dir}, nil
}

func (h *benchHost) close() { h.pool.Close(); os.RemoveAll(h.dir) }

// serve serves v on a socket until the returned stop is called.
func (h *benchHost) serve(v *vgpu.VGPU) (path string, stop func(), err error) {
	path = filepath.Join(h.dir, v.Name()+".sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return "", nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- v.Serve(ctx, l) }()
	var once sync.Once
	return path, func() { once.Do(func() { cancel(); <-done; l.Close() }) }, nil
}

func (c *benchConfig) workerCount() int {
	if c.workers > 0 {
		return c.workers
	}
	return runtime.GOMAXPROCS(0)
}

// prefill gives the vGPU's graphics memory seeded content before the guest
// starts, the same in every run: a fraction c.fill of the pages hold data,
// the rest are zero.
func (c *benchConfig) prefill(v *vgpu.VGPU) {
	rng := rand.New(rand.NewPCG(uint64(c.seed), 0x66696c6c)) // "fill"
	mem := v.Memory()
	for off := 0; off < len(mem); off += dirty.PageSize {
		if rng.Float64() >= c.fill {
			continue
		}
		for i := off; i < off+dirty.PageSize; i += 8 {
			binary.LittleEndian.PutUint64(mem[i:], rng.Uint64())
		}
	}
}

// startGuest attaches the simulated VM (MSI, interrupts) with the run's
// seed and workload.
func (c *benchConfig) startGuest(socket string) (*sim.VM, error) {
	return sim.StartVM(socket, c.seed, guest.WorkloadConfig{MemSize: c.wmem}, sim.Options{MSI: true})
}

func (c *benchConfig) reference(ctx context.Context) ([32]byte, error) {
	h, err := newBenchHost(c.mem)
	if err != nil {
		return [32]byte{}, err
	}
	defer h.close()
	v, err := vgpu.New(vgpu.Config{Name: "reference", MemSize: c.mem}, h.pool, c.log)
	if err != nil {
		return [32]byte{}, err
	}
	defer v.Close()
	c.prefill(v)
	path, stop, err := h.serve(v)
	if err != nil {
		return [32]byte{}, err
	}
	defer stop()
	g, err := c.startGuest(path)
	if err != nil {
		return [32]byte{}, err
	}
	defer g.Close()
	if err := g.Run(ctx, c.steps); err != nil {
		return [32]byte{}, err
	}
	return g.Digest()
}

// migrateOnce runs the workload on a fresh source host, migrates it with
// strategy st to a fresh destination host at the chosen operation, lets it
// finish there and returns the source's report and the final digest.
func (c *benchConfig) migrateOnce(ctx context.Context, st precopy.Strategy, startAt, pauseAt uint64, pauseOp int) (precopy.Report, [32]byte, error) {
	var rep precopy.Report
	var sum [32]byte
	src, err := newBenchHost(2 * c.mem)
	if err != nil {
		return rep, sum, err
	}
	defer src.close()
	dst, err := newBenchHost(2 * c.mem)
	if err != nil {
		return rep, sum, err
	}
	defer dst.close()
	// A neighbour on the source host, so the vGPU sits at a different pool
	// offset on each side and the remapping is real.
	nb, err := vgpu.New(vgpu.Config{Name: "neighbour", MemSize: 1 << 20}, src.pool, c.log)
	if err != nil {
		return rep, sum, err
	}
	defer nb.Close()
	v, err := vgpu.New(vgpu.Config{Name: "bench", MemSize: c.mem}, src.pool, c.log)
	if err != nil {
		return rep, sum, err
	}
	defer v.Close()
	c.prefill(v)
	path, stopSrc, err := src.serve(v)
	if err != nil {
		return rep, sum, err
	}
	defer stopSrc()
	g, err := c.startGuest(path)
	if err != nil {
		return rep, sum, err
	}
	defer g.Close()
	paused, err := g.PauseAt(pauseAt, pauseOp)
	if err != nil {
		return rep, sum, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- g.Run(ctx, c.steps) }()
	finished := false
	defer func() {
		// On a failed run, stop the workload before its bus goes away.
		if !finished {
			cancel()
			g.Resume()
			<-done
		}
	}()
	if err := g.WaitStep(ctx, startAt); err != nil {
		return rep, sum, err
	}

	a, b, err := loopbackPair()
	if err != nil {
		return rep, sum, err
	}
	defer a.Close()
	defer b.Close()
	type received struct {
		v   *vgpu.VGPU
		err error
	}
	recv := make(chan received, 1)
	go func() {
		v, _, err := precopy.Receive(ctx, b, vgpu.RestoreArgs{Config: vgpu.Config{Name: "bench"}, Pool: dst.pool, Log: c.log}, nil)
		recv <- received{v, err}
	}()
	s, err := precopy.NewSource(v, a, precopy.Options{Strategy: st, BackgroundRate: c.bgRate, Workers: c.workers, Log: c.log})
	if err != nil {
		return rep, sum, err
	}
	fail := func(err error) (precopy.Report, [32]byte, error) {
		s.Rollback()
		a.Close()
		if r := <-recv; r.v != nil {
			r.v.Close()
		}
		return rep, sum, err
	}
	if err := s.Precopy(ctx); err != nil {
		return fail(err)
	}
	select {
	case <-paused:
	case err := <-done:
		finished = true
		return fail(fmt.Errorf("the workload ended (%v) before the stop", err))
	}
	if rep, err = s.Stop(ctx); err != nil {
		return fail(err)
	}
	fmt.Fprintf(c.out, " pre-copy %.0f ms (%d pages, %.1f MiB); VM stopped at step %d;",
		ms(rep.Precopy.Duration), rep.Precopy.Pages, mibs(rep.Precopy.Bytes), pauseAt)
	r := <-recv
	s.Close()
	if r.err != nil {
		return rep, sum, r.err
	}
	defer r.v.Close()
	dpath, stopDst, err := dst.serve(r.v)
	if err != nil {
		return rep, sum, err
	}
	defer stopDst()
	if err := g.Move(dpath); err != nil {
		return rep, sum, err
	}
	r.v.Resume()
	stopSrc()
	v.Close()
	g.Resume()
	err = <-done
	finished = true
	if err != nil {
		return rep, sum, fmt.Errorf("workload after the migration: %w", err)
	}
	sum, err = g.Digest()
	return rep, sum, err
}

// loopbackPair returns both ends of a loopback TCP connection.
func loopbackPair() (a, b net.Conn, err error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, nil, err
	}
	defer l.Close()
	if a, err = net.Dial("tcp", l.Addr().String()); err != nil {
		return nil, nil, err
	}
	if b, err = l.Accept(); err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func mibs(n uint64) float64 { return float64(n) / (1 << 20) }

// table prints one row per run, a mean row per strategy when there are
// several runs, and the means' ratios against stop-and-copy.
func (c *benchConfig) table(runs []benchRun) {
	fmt.Fprintf(c.out, "\nstop phase (downtime), times in ms; pages and MiB sent; dirty pages at the stop by source:\n")
	tw := tabwriter.NewWriter(c.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\trun\tstop\tquiesce\tscan\ttransfer\trestore\treplay\tother\tpre pages\tpre MiB\tstop pages\tstop MiB\tengine\tbackgr\tsample\thash\tunrec\thashed\tscan GB/s\tapi log raw/compact\t")
	row := func(name, run string, r precopy.Report) {
		p, s := r.Precopy, r.Stop
		b := s.BySource
		fmt.Fprintf(tw, "%s\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t%.2f\t%d\t%.2f\t%d\t%d\t%d\t%d\t%d\t%d\t%.2f\t%d/%d\t\n",
			name, run, ms(s.Total), ms(s.Quiesce), ms(s.Scan), ms(s.Transfer), ms(s.Restore), ms(s.Replay), ms(s.Other()),
			p.Pages, mibs(p.Bytes), s.DirtyPages, mibs(s.Bytes),
			b[dirty.Engine], b[dirty.Background], b[dirty.Sample], b[dirty.Hash], b[dirty.Unrecorded],
			s.PagesHashed, r.HashRate/1e9, r.APILog.RawEntries, r.APILog.CompactedEntries)
	}
	means := map[precopy.Strategy]precopy.Report{}
	for _, st := range c.strategies {
		var group []precopy.Report
		for i, r := range runs {
			if r.strategy == st {
				row(string(st), fmt.Sprint(len(group)+1), r.rep)
				group = append(group, runs[i].rep)
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
	if !ok || base.Stop.Total == 0 {
		return
	}
	fmt.Fprintf(c.out, "\nratios vs stopcopy (means):\n")
	tw = tabwriter.NewWriter(c.out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tstop time\tstop pages\tstop bytes\tall bytes sent\t")
	for _, st := range c.strategies {
		m := means[st]
		fmt.Fprintf(tw, "%s\t%.3f\t%.3f\t%.3f\t%.3f\t\n", st,
			float64(m.Stop.Total)/float64(base.Stop.Total),
			float64(m.Stop.DirtyPages)/float64(max(base.Stop.DirtyPages, 1)),
			float64(m.Stop.Bytes)/float64(max(base.Stop.Bytes, 1)),
			float64(m.Stop.Bytes+m.Precopy.Bytes)/float64(max(base.Stop.Bytes+base.Precopy.Bytes, 1)))
	}
	tw.Flush()
}

// mean averages reports field by field (the first one's strategy and API
// log sizes).
func mean(rs []precopy.Report) precopy.Report {
	if len(rs) == 0 {
		return precopy.Report{}
	}
	m := rs[0]
	if len(rs) == 1 {
		return m
	}
	n := len(rs)
	avgD := func(f func(precopy.Report) time.Duration) time.Duration {
		var t time.Duration
		for _, r := range rs {
			t += f(r)
		}
		return t / time.Duration(n)
	}
	avgU := func(f func(precopy.Report) uint64) uint64 {
		var t uint64
		for _, r := range rs {
			t += f(r)
		}
		return t / uint64(n)
	}
	avgI := func(f func(precopy.Report) int) int {
		return int(avgU(func(r precopy.Report) uint64 { return uint64(f(r)) }))
	}
	m.Precopy.Duration = avgD(func(r precopy.Report) time.Duration { return r.Precopy.Duration })
	m.Precopy.Pages = avgU(func(r precopy.Report) uint64 { return r.Precopy.Pages })
	m.Precopy.Bytes = avgU(func(r precopy.Report) uint64 { return r.Precopy.Bytes })
	s := &m.Stop
	s.Total = avgD(func(r precopy.Report) time.Duration { return r.Stop.Total })
	s.Quiesce = avgD(func(r precopy.Report) time.Duration { return r.Stop.Quiesce })
	s.Scan = avgD(func(r precopy.Report) time.Duration { return r.Stop.Scan })
	s.Transfer = avgD(func(r precopy.Report) time.Duration { return r.Stop.Transfer })
	s.Restore = avgD(func(r precopy.Report) time.Duration { return r.Stop.Restore })
	s.Replay = avgD(func(r precopy.Report) time.Duration { return r.Stop.Replay })
	s.DirtyPages = avgI(func(r precopy.Report) int { return r.Stop.DirtyPages })
	s.PagesHashed = avgI(func(r precopy.Report) int { return r.Stop.PagesHashed })
	s.Bytes = avgU(func(r precopy.Report) uint64 { return r.Stop.Bytes })
	for i := range s.BySource {
		s.BySource[i] = avgI(func(r precopy.Report) int { return r.Stop.BySource[i] })
	}
	var rate float64
	for _, r := range rs {
		rate += r.HashRate
	}
	m.HashRate = rate / float64(n)
	return m
}
