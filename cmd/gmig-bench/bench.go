package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/bytesize"
	"github.com/gmig-dev/gmig/internal/cmdline"
	"github.com/gmig-dev/gmig/precopy"
)

// benchConfig is what gmig-bench runs: a matrix of cases (a workload
// profile on a vGPU of some size, at some dirty rate), each migrated with
// every strategy from the same seed to the same pause point, in process
// (two gmigd hosts, the simulated guest) and optionally with real VMs (two
// gmigd daemons, QEMU, the Linux guest). docs/benchmarks.md explains the
// output.
type benchConfig struct {
	profiles    []benchProfile // compared at mem
	mem         uint64
	mems        []uint64       // memory sweep of memProfiles
	memProfiles []benchProfile // each swept over mems
	rates       []float64      // dirty-rate sweep of rateProfile at mem
	rateProfile guest.WorkloadConfig
	fill        float64
	fps         float64
	wmem        uint64 // the mix's region (0: its default)

	steps         int // the mix (unpaced): steps in all; pre-copy from a quarter, the pause at half
	warmup, hold  time.Duration
	holdRate      float64 // MiB/s of vGPU memory the default hold allows for the live phase
	seed          int64
	strategies    []precopy.Strategy
	compareSerial bool // also oneshot with the serial stop phase (before/after)
	runs          int
	bgRate        int
	noTracking    bool // no log of the guest's aperture writes: the stop phase hashes every page
	// compareTracking runs every variant but stopcopy (which hashes
	// nothing) twice: with the log and with the full hash.
	compareTracking bool
	workers         int
	streams         int // the vGPU stop phase's streams (0: precopy.DefaultStreams)

	overhead        time.Duration // tracking overhead measurement (0: none)
	overheadProfile guest.WorkloadConfig
	overheadMem     uint64
	overheadBgRate  int

	inproc  bool // run the in-process matrix
	qemu    bool
	qemuCfg qemuBenchConfig

	outDir string
	log    zerolog.Logger
	out    io.Writer // the tables
	status io.Writer // progress
}

// benchCase is one workload on one vGPU size: every strategy migrates it.
type benchCase struct {
	Mode     string               `json:"mode"`  // "inproc" or "qemu"
	Sweep    string               `json:"sweep"` // "profiles", "memory" or "rate", joined by "+" when a case serves several
	Workload string               `json:"workload"`
	Mem      uint64               `json:"mem_bytes"`
	Burst    *burstSpec           `json:"burst,omitempty"` // the dirty profile (no workload; bench_burst.go)
	cfg      guest.WorkloadConfig // Workload, parsed
}

// benchProfile is a guest workload profile, or the dirty profile.
type benchProfile struct {
	w     guest.WorkloadConfig
	burst *burstSpec
}

func (c benchCase) String() string {
	return fmt.Sprintf("%s %s on %s", c.Mode, c.Workload, sizeString(c.Mem))
}

func sizeString(n uint64) string {
	if n >= 1<<30 && n%(1<<30) == 0 {
		return fmt.Sprintf("%d GiB", n>>30)
	}
	return fmt.Sprintf("%d MiB", n>>20)
}

func cmdBench(args []string) error {
	c := benchConfig{out: os.Stdout, status: os.Stderr}
	fs := flag.NewFlagSet("gmig-bench", flag.ContinueOnError)
	mem := cmdline.ByteSize(1 << 30)
	fs.Var(&mem, "mem", "vGPU memory of the profile comparison and the rate sweep")
	profiles := fs.String("profiles", "render", "workload profiles to compare at -mem, comma-separated (idle, render, stencil, churn, inference, cpu, mixed, or all; and dirty:pct=P or dirty:bytes=SIZE, no workload but a burst of guest stores into P % of the pages, or SIZE's worth, spread over the vGPU once the pre-copy is done); settings after a colon: render:rate=300:fps=30")
	mems := fs.String("mems", "", "memory sweep: vGPU sizes for -mem-profile, comma-separated (e.g. 256M,512M,1G,2G,4G)")
	memProfile := fs.String("mem-profile", "render", "the memory sweep's profiles, comma-separated as -profiles (each swept over -mems)")
	rates := fs.String("rates", "", "dirty-rate sweep: MiB/s for -rate-profile at -mem, comma-separated (0 runs idle)")
	rateProfile := fs.String("rate-profile", "churn", "the rate sweep's profile")
	fs.Float64Var(&c.fill, "fill", 0.75, "fraction of the vGPU's pages the guest fills with resident data before its workload (textures, weights)")
	fs.Float64Var(&c.fps, "fps", 0, "profile steps (frames) per second of guest time (0: 60)")
	wmem := cmdline.ByteSize(0)
	fs.Var(&wmem, "workload-mem", "the mix's region (default 2M)")
	fs.IntVar(&c.steps, "steps", 1000, "the mix (unpaced): steps; pre-copy from a quarter, the pause at half")
	fs.DurationVar(&c.warmup, "warmup", 500*time.Millisecond, "profiles: guest time before the migration starts")
	fs.DurationVar(&c.hold, "hold", 0, "profiles: guest time from the migration's start to the pause point (0: 0.5s + the vGPU memory at -hold-rate)")
	fs.Float64Var(&c.holdRate, "hold-rate", 200, "MiB/s of vGPU memory the default -hold allows the live phase (a slow machine's pre-copy rate)")
	fs.Int64Var(&c.seed, "seed", 1, "workload seed (also picks the mix's pause operation)")
	strategies := fs.String("strategies", "oneshot,iterative,stopcopy", "strategies to compare, comma-separated")
	fs.BoolVar(&c.compareSerial, "compare-serial", false, "also run oneshot and stopcopy with the serial stop phase (scan everything, then copy, hash and send), for before/after")
	fs.IntVar(&c.runs, "runs", 1, "runs per strategy and case")
	fs.IntVar(&c.bgRate, "background-rate", 0, "oneshot: background re-hash budget in pages/s between pre-copy and stop")
	fs.IntVar(&c.workers, "workers", 0, "hashing workers (default GOMAXPROCS)")
	fs.IntVar(&c.streams, "streams", 0, fmt.Sprintf("in-process: the vGPU stop phase's streams, 1 … %d (0: %d here); each run prints its GB/s beside the loopback of as many streams",
		precopy.MaxDefaultStreams, precopy.DefaultStreams()))
	fs.BoolVar(&c.noTracking, "no-tracking", false, "no log of the guest's aperture writes (the stop phase hashes every page), in process and with -qemu, for before/after")
	fs.BoolVar(&c.compareTracking, "compare-tracking", false, "run oneshot and iterative twice, with the write log and with the full hash (variant +hash), and print them side by side (stopcopy hashes nothing: once)")
	fs.DurationVar(&c.overhead, "overhead", 0, "measure dirty tracking's steady-state cost for this long (0: skip), alternating off and on")
	ovProfile := fs.String("overhead-profile", "render:fps=0", "the overhead measurement's workload (unpaced: throughput)")
	ovMem := cmdline.ByteSize(256 << 20)
	fs.Var(&ovMem, "overhead-mem", "the overhead measurement's vGPU memory")
	fs.IntVar(&c.overheadBgRate, "overhead-background-rate", 16384, "the overhead's second measurement: background re-hash pages/s with the marks")
	fs.BoolVar(&c.inproc, "inproc", true, "run the in-process matrix (two gmigd hosts in this process, the simulated guest)")
	fs.BoolVar(&c.qemu, "qemu", false, "also run the real-VM matrix: two gmigd daemons, QEMU and the Linux guest")
	c.qemuCfg.flags(fs)
	fs.StringVar(&c.outDir, "out", "", "write results.json, results.md and PNG plots here")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the whole run here (go tool pprof)")
	replot := fs.String("replot", "", "run nothing: read these results.json files (comma-separated: their results together, as of one run), print the tables and write results.md and the plots into -out")
	logLevel := fs.String("log-level", "warn", "gmigd log level")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if c.log, err = cmdline.NewLogger(*logLevel); err != nil {
		return err
	}
	c.mem, c.wmem = uint64(mem), uint64(wmem)
	c.overheadMem = uint64(ovMem)
	if c.profiles, err = parseBenchProfiles(*profiles); err != nil {
		return err
	}
	if c.memProfiles, err = parseBenchProfiles(*memProfile); err != nil {
		return err
	}
	if c.rateProfile, err = parseProfile(*rateProfile); err != nil {
		return err
	}
	if c.overheadProfile, err = parseProfile(*ovProfile); err != nil {
		return err
	}
	if c.mems, err = parseSizes(*mems); err != nil {
		return err
	}
	if c.rates, err = parseFloats(*rates); err != nil {
		return err
	}
	if c.strategies, err = parseStrategies(*strategies); err != nil {
		return err
	}
	if c.steps < 4 || c.runs < 1 || c.fill < 0 || c.fill > 1 || c.fps < 0 || c.streams < 0 || c.streams > precopy.MaxDefaultStreams {
		return fmt.Errorf("want -steps ≥ 4, -runs ≥ 1, -fill in [0, 1], -fps ≥ 0 and -streams in [0, %d]", precopy.MaxDefaultStreams)
	}
	if c.qemu {
		if err := c.qemuCfg.parse(); err != nil {
			return err
		}
	}
	if c.noTracking && c.compareTracking {
		return fmt.Errorf("gmig-bench: -no-tracking and -compare-tracking: choose one")
	}
	if c.outDir != "" {
		if err := os.MkdirAll(c.outDir, 0o755); err != nil {
			return err
		}
	}
	if *replot != "" {
		return c.replot(*replot)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return c.run(ctx)
}

// parseProfiles reads -profiles: names or specs (colons for commas).
func parseProfiles(s string) ([]guest.WorkloadConfig, error) {
	if s == "all" {
		s = "idle,render,stencil,churn,inference,cpu,mixed"
	}
	var out []guest.WorkloadConfig
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == "" {
			continue
		}
		w, err := parseProfile(p)
		if err != nil {
			return nil, err
		}
		out = append(out, w)
	}
	return out, nil
}

// parseBenchProfiles reads -profiles or -mem-profile: guest workload
// profiles and dirty profiles.
func parseBenchProfiles(s string) ([]benchProfile, error) {
	var out []benchProfile
	var rest []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p == burstProfile || strings.HasPrefix(p, burstProfile+":") {
			b, err := parseBurst(p)
			if err != nil {
				return nil, err
			}
			out = append(out, benchProfile{burst: &b})
			continue
		}
		rest = append(rest, p)
	}
	ws, err := parseProfiles(strings.Join(rest, ","))
	if err != nil {
		return nil, err
	}
	for _, w := range ws {
		out = append(out, benchProfile{w: w})
	}
	return out, nil
}

// parseProfile reads one profile spec, with colons or commas between its
// settings.
func parseProfile(s string) (guest.WorkloadConfig, error) {
	return guest.ParseWorkload(strings.ReplaceAll(s, ":", ","))
}

func parseSizes(s string) ([]uint64, error) {
	var out []uint64
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := bytesize.Parse(f)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

func parseFloats(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		v, err := strconv.ParseFloat(f, 64)
		if err != nil || v < 0 || math.IsInf(v, 0) {
			return nil, fmt.Errorf("bad rate %q (want MiB/s ≥ 0)", f)
		}
		out = append(out, v)
	}
	return out, nil
}

func parseStrategies(s string) ([]precopy.Strategy, error) {
	var out []precopy.Strategy
	for _, f := range strings.Split(s, ",") {
		st, err := precopy.ParseStrategy(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, st)
	}
	return out, nil
}

// workload completes a case's workload with the bench's fill and frame
// rate where its spec leaves them open.
func (c *benchConfig) workload(w guest.WorkloadConfig) guest.WorkloadConfig {
	if w.Fill == 0 {
		w.Fill = c.fill
	}
	if w.FPS == 0 && c.fps > 0 {
		w.FPS = c.fps
	}
	if w.Profile == guest.ProfileMixed && w.MemSize == 0 {
		w.MemSize = c.wmem
	}
	return w
}

// cases is the in-process matrix: the profiles at -mem, the memory sweep,
// the rate sweep; a case that two of them share runs once.
func (c *benchConfig) cases(mode string) []benchCase {
	var out []benchCase
	at := map[string]int{}
	add := func(sweep string, bp benchProfile, mem uint64) {
		w := c.workload(bp.w)
		bc := benchCase{Mode: mode, Sweep: sweep, Workload: w.Spec(), Mem: mem, cfg: w}
		if bp.burst != nil {
			bc.Workload, bc.Burst, bc.cfg = bp.burst.String(), bp.burst, guest.WorkloadConfig{}
		}
		key := bc.String()
		if i, ok := at[key]; ok {
			out[i].Sweep += "+" + sweep // one run serves both sweeps
			return
		}
		at[key] = len(out)
		out = append(out, bc)
	}
	for _, bp := range c.profiles {
		add("profiles", bp, c.mem)
	}
	for _, bp := range c.memProfiles {
		for _, m := range c.mems {
			add("memory", bp, m)
		}
	}
	for _, r := range c.rates {
		w := c.rateProfile
		if r == 0 {
			w = guest.WorkloadConfig{Profile: guest.ProfileIdle}
		} else {
			w.Rate = r
		}
		add("rate", benchProfile{w: w}, c.mem)
	}
	return out
}

func (c *benchConfig) workerCount() int {
	if c.workers > 0 {
		return c.workers
	}
	return runtime.GOMAXPROCS(0)
}

// variants are the stop phases each case runs: the strategies, and with
// -compare-serial the serial stop phase of oneshot and stopcopy too.
func (c *benchConfig) variants() []benchVariant {
	var out []benchVariant
	for _, st := range c.strategies {
		// Stop-and-copy hashes nothing: the log changes nothing there.
		hashed := st != precopy.StopCopy
		out = append(out, benchVariant{Strategy: st, FullHash: c.noTracking && hashed})
		if c.compareTracking && hashed {
			out = append(out, benchVariant{Strategy: st, FullHash: true})
		}
		if c.compareSerial && (st == precopy.OneShot || st == precopy.StopCopy) {
			out = append(out, benchVariant{Strategy: st, Serial: true, FullHash: c.noTracking && hashed})
		}
	}
	return out
}

// benchVariant is a strategy, whether its stop phase is the serial one
// (scan everything, then send), and whether it runs without the log of
// the guest's writes (the stop phase hashes every page).
type benchVariant struct {
	Strategy precopy.Strategy
	Serial   bool
	FullHash bool
}

// fullHashSuffix marks a variant run without the write log.
const fullHashSuffix = "+hash"

func (v benchVariant) String() string {
	s := string(v.Strategy)
	if v.Serial {
		s += "-serial"
	}
	if v.FullHash {
		s += fullHashSuffix
	}
	return s
}

func (c *benchConfig) run(ctx context.Context) error {
	res := &benchFile{Command: commandLine(os.Args), Started: time.Now()}
	res.Machine = describeMachine(c.workerCount())
	c.statusf("gmig-bench: %d cores (GOMAXPROCS %d), load %.1f; %d hashing workers\n",
		res.Machine.Cores, res.Machine.GOMAXPROCS, res.Machine.Load1, c.workerCount())
	var cases []benchCase
	if c.inproc {
		cases = c.cases("inproc")
	}
	if c.qemu {
		cases = append(cases, c.qemuCfg.cases(c)...)
	}
	total := len(cases) * len(c.variants()) * c.runs
	n := 0
	for _, bc := range cases {
		var rs []benchResult
		var err error
		if bc.Mode == "qemu" {
			rs, err = c.runQEMUCase(ctx, bc, &n, total)
		} else {
			rs, err = c.runInProcCase(ctx, bc, &n, total)
		}
		res.Results = append(res.Results, rs...)
		if werr := c.save(res); werr != nil {
			return werr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", bc, err)
		}
	}
	if c.overhead > 0 {
		ov, err := c.measureOverhead(ctx)
		if err != nil {
			return fmt.Errorf("tracking overhead: %w", err)
		}
		res.Overhead = ov
	}
	res.Machine.Load1End = loadAvg()
	res.Finished = time.Now()
	writeTables(c.out, res)
	if err := c.save(res); err != nil {
		return err
	}
	if c.outDir != "" {
		if err := writePlots(c.outDir, res); err != nil {
			return err
		}
		c.statusf("wrote %s/results.json, results.md and the plots\n", c.outDir)
	}
	return nil
}

// replot prints the tables of one or more results.json (paths
// comma-separated: their commands joined with "; ", their results
// appended in order, the first's machine) and writes the markdown and the
// plots into the output directory, and there the results of several as
// one results.json.
func (c *benchConfig) replot(paths string) error {
	var f benchFile
	for i, path := range strings.Split(paths, ",") {
		var g benchFile
		if err := readResults(path, &g); err != nil {
			return err
		}
		if i == 0 {
			f = g
			continue
		}
		f.Command += "; " + g.Command
		f.Results = append(f.Results, g.Results...)
		f.Overhead = append(f.Overhead, g.Overhead...)
		if g.Finished.After(f.Finished) {
			f.Finished, f.Machine.Load1End = g.Finished, g.Machine.Load1End
		}
	}
	writeTables(c.out, &f)
	if c.outDir == "" {
		return nil
	}
	if strings.Contains(paths, ",") {
		// The results together, as one run's results.json (and results.md).
		if err := c.save(&f); err != nil {
			return err
		}
		return writePlots(c.outDir, &f)
	}
	if err := os.MkdirAll(c.outDir, 0o755); err != nil {
		return err
	}
	md, err := os.Create(filepath.Join(c.outDir, "results.md"))
	if err != nil {
		return err
	}
	writeMarkdown(md, &f)
	if err := md.Close(); err != nil {
		return err
	}
	return writePlots(c.outDir, &f)
}

// readResults reads a results.json.
func readResults(path string, f *benchFile) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, f); err != nil {
		return fmt.Errorf("gmig-bench: %s: %w", path, err)
	}
	return nil
}

// statusf writes a progress line.
func (c *benchConfig) statusf(format string, args ...any) {
	if c.status != nil {
		fmt.Fprintf(c.status, format, args...)
	}
}
