package main

import (
	"bytes"
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/internal/vgpu"
	"github.com/gmig-dev/gmig/precopy"
)

// cmdMigrate migrates vGPUs on the CUDA back end between two placements
// on the GPU (two hosts in this process: two pools, two device mirrors),
// first under the seeded workload (every step checked against its model;
// the final digest against a run never migrated, on the software back
// end), then for the downtime matrix.
func cmdMigrate(args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	wmem := size1(256 << 20)
	fs.Var(&wmem, "workload-mem", "vGPU size for the workload migrations")
	steps := fs.Int("steps", 400, "workload steps (pre-copy from a quarter, the VM stops in the middle)")
	seed := fs.Int64("seed", 1, "seed")
	msizes := sizes{1 << 30, 4 << 30, 16 << 30}
	fs.Var(&msizes, "sizes", "vGPU sizes for the downtime matrix")
	fracs := fs.String("dirty", "0.001,0.01,0.1", "fractions of pages dirtied between the pre-copy and the pause")
	skipWorkload := fs.Bool("skip-workload", false, "only the downtime matrix")
	strats := fs.String("strategies", "oneshot,oneshot+gpu,oneshot+split,stopcopy",
		"downtime strategies: oneshot (final scan on the CPU workers), oneshot+gpu (on the GPU), oneshot+split (both at once), stopcopy")
	gpuShare := fs.Float64("gpu-share", 0.4, "oneshot+split: the GPU's share of the pages")
	logLevel := fs.String("log-level", "warn", "log level")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := newLog(*logLevel)
	if err != nil {
		return err
	}
	if _, err := openGPU(); err != nil {
		return err
	}
	ctx := context.Background()
	if !*skipWorkload {
		if err := workloadMigrations(ctx, log, uint64(wmem), *steps, *seed); err != nil {
			return err
		}
	}
	var fr []float64
	for _, f := range strings.Split(*fracs, ",") {
		var v float64
		if _, err := fmt.Sscanf(strings.TrimSpace(f), "%g", &v); err != nil {
			return fmt.Errorf("bad dirty fraction %q", f)
		}
		fr = append(fr, v)
	}
	return downtimeMatrix(ctx, log, msizes, fr, strings.Split(*strats, ","), *gpuShare, *seed)
}

// host is one side of a migration: a pool and a socket directory.
type host struct {
	pool *pool.Pool
	dir  string
}

func newHost(size uint64) (*host, error) {
	p, err := pool.New(size)
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "gmig-nvbench-")
	if err != nil {
		p.Close()
		return nil, err
	}
	return &host{pool: p, dir: dir}, nil
}

func (h *host) close() { h.pool.Close(); os.RemoveAll(h.dir) }

// serve serves v on a socket until stop.
func (h *host) serve(v *vgpu.VGPU) (path string, stop func(), err error) {
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

func loopback() (a, b net.Conn, err error) {
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

// workloadMigrations: the reference digest on the software back end, then
// one migration per strategy between two CUDA vGPUs, the VM stopped at the
// same operation each time.
func workloadMigrations(ctx context.Context, log zerolog.Logger, mem uint64, steps int, seed int64) error {
	wcfg := guest.WorkloadConfig{MemSize: mem / 4, Check: true}
	startAt, pauseAt := uint64(steps/4), uint64(steps/2)
	fmt.Printf("\n== workload migrations: %s vGPUs, workload on %s (checked against its model every step), seed %d, %d steps, pre-copy from step %d, VM stops after step %d\n",
		fmtSize(mem), fmtSize(wcfg.MemSize), seed, steps, startAt, pauseAt)
	ref, err := func() ([32]byte, error) {
		h, err := newHost(mem)
		if err != nil {
			return [32]byte{}, err
		}
		defer h.close()
		v, err := vgpu.New(vgpu.Config{Name: "reference", MemSize: mem}, h.pool, log)
		if err != nil {
			return [32]byte{}, err
		}
		defer v.Close()
		path, stop, err := h.serve(v)
		if err != nil {
			return [32]byte{}, err
		}
		defer stop()
		vm, err := sim.StartVM(path, seed, wcfg, sim.Options{MSI: true})
		if err != nil {
			return [32]byte{}, err
		}
		defer vm.Close()
		if err := vm.Run(ctx, steps); err != nil {
			return [32]byte{}, err
		}
		return vm.Digest()
	}()
	if err != nil {
		return fmt.Errorf("reference run: %w", err)
	}
	fmt.Printf("reference (software back end, never migrated): digest %s\n", hex.EncodeToString(ref[:8]))
	for _, st := range []precopy.Strategy{precopy.OneShot, precopy.Iterative, precopy.StopCopy} {
		rep, sum, srcOff, dstOff, err := workloadMigrateOnce(ctx, log, mem, wcfg, steps, seed, st, startAt, pauseAt)
		if err != nil {
			return fmt.Errorf("%s: %w", st, err)
		}
		verdict := "EQUAL to the reference"
		if sum != ref {
			verdict = "DIFFERS from the reference"
		}
		fmt.Printf("%-9s source pool offset %#x -> destination %#x: stop %.2f ms (%d pages at the stop, %s); final digest %s %s\n",
			st, srcOff, dstOff, ms(rep.Stop.Total), rep.Stop.DirtyPages, dirty.DescribeBySource(rep.Stop.BySource), hex.EncodeToString(sum[:8]), verdict)
		if sum != ref {
			return fmt.Errorf("%s: digest %x, reference %x", st, sum, ref)
		}
	}
	return nil
}

func workloadMigrateOnce(ctx context.Context, log zerolog.Logger, mem uint64, wcfg guest.WorkloadConfig, steps int, seed int64,
	st precopy.Strategy, startAt, pauseAt uint64) (rep precopy.Report, sum [32]byte, srcOff, dstOff uint64, err error) {
	src, err := newHost(mem + 1<<20)
	if err != nil {
		return
	}
	defer src.close()
	dst, err := newHost(mem)
	if err != nil {
		return
	}
	defer dst.close()
	nb, err := vgpu.New(vgpu.Config{Name: "neighbour", MemSize: 1 << 20}, src.pool, log)
	if err != nil {
		return
	}
	defer nb.Close()
	v, err := vgpu.New(vgpu.Config{Name: "wl", MemSize: mem, Backend: vgpu.BackendCUDA}, src.pool, log)
	if err != nil {
		return
	}
	defer v.Close()
	dv, err := vgpu.New(vgpu.Config{Name: "wl", MemSize: mem, Backend: vgpu.BackendCUDA}, dst.pool, log)
	if err != nil {
		return
	}
	defer dv.Close()
	srcOff, dstOff = v.Partition().Offset, dv.Partition().Offset
	path, stopSrc, err := src.serve(v)
	if err != nil {
		return
	}
	defer stopSrc()
	vm, err := sim.StartVM(path, seed, wcfg, sim.Options{MSI: true})
	if err != nil {
		return
	}
	defer vm.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- vm.Run(ctx, steps) }()
	finished := false
	defer func() {
		if !finished {
			cancel()
			vm.Resume()
			<-done
		}
	}()
	if err = vm.WaitStep(ctx, startAt); err != nil {
		return
	}
	a, b, err := loopback()
	if err != nil {
		return
	}
	defer a.Close()
	defer b.Close()
	recv := make(chan error, 1)
	go func() {
		_, err := precopy.Receive(ctx, b, dv, precopy.Options{Log: log})
		recv <- err
	}()
	s, err := precopy.NewSource(v, a, precopy.Options{Strategy: st, Log: log})
	if err != nil {
		return
	}
	fail := func(e error) error {
		s.Rollback()
		a.Close()
		<-recv
		return e
	}
	if err = s.Precopy(ctx); err != nil {
		err = fail(err)
		return
	}
	// The VM stops at the first operation boundary after step pauseAt
	// (the workload is deterministic wherever it stops).
	if err = vm.WaitStep(ctx, pauseAt); err != nil {
		err = fail(err)
		return
	}
	if err = vm.Pause(ctx); err != nil {
		err = fail(err)
		return
	}
	if rep, err = s.Stop(ctx); err != nil {
		err = fail(err)
		return
	}
	if err = <-recv; err != nil {
		return
	}
	s.Close()
	dpath, stopDst, err := dst.serve(dv)
	if err != nil {
		return
	}
	defer stopDst()
	if err = vm.Move(dpath); err != nil {
		return
	}
	dv.Resume()
	stopSrc()
	vm.Resume()
	err = <-done
	finished = true
	if err != nil {
		err = fmt.Errorf("workload after the migration: %w", err)
		return
	}
	sum, err = vm.Digest()
	return
}

// dtResult is one downtime run.
type dtResult struct {
	size      uint64
	frac      float64
	strategy  string
	rep       precopy.Report
	gpuBytes  uint64 // dirtied by GPU commands
	cpuPages  int    // dirtied by CPU stores through the aperture
	attach    time.Duration
	resume    time.Duration
	total     time.Duration
	same      bool
	writeBack uint64 // bytes the source wrote back from the device at quiesce
}

// downtimeMatrix runs every size x dirty fraction x strategy.
func downtimeMatrix(ctx context.Context, log zerolog.Logger, ss []uint64, fracs []float64, strats []string, share float64, seed int64) error {
	fmt.Printf("\n== downtime: CUDA back end on both sides, %d%% of pages hold data before the guest starts; after the pre-copy the guest dirties a fraction of pages (GPU FILL+RENDER through the ring, half, at most what its GTT maps; CPU stores through the aperture, the rest), then pauses. Downtime = pause to resume of the guest: stop phase (quiesce incl. device write-back, scan, transfer, restore, replay, other) + attach of the destination front end + resume. Loopback TCP, one stream.\n", 75)
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "size\tdirty\tstrategy\tdowntime ms\tquiesce\tscan\ttransfer\trestore\treplay\tother\tattach\tresume\tstop pages\tstop MiB\tby source\twrite-back MiB\tpre-copy ms\tpre MiB\tscan GB/s\tmemory equal\t")
	for _, size := range ss {
		for _, f := range fracs {
			for _, strat := range strats {
				r, err := downtimeRun(ctx, log, size, f, strat, share, seed)
				if err != nil {
					return fmt.Errorf("%s, dirty %g, %s: %w", fmtSize(size), f, strat, err)
				}
				p, s := r.rep.Precopy, r.rep.Stop
				fmt.Fprintf(tw, "%s\t%g%%\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t%.1f\t%s\t%.1f\t%.0f\t%.0f\t%.1f\t%v\t\n",
					fmtSize(size), 100*f, strat, ms(r.total), ms(s.Quiesce), ms(s.Scan), ms(s.Transfer), ms(s.Restore), ms(s.Replay), ms(s.Other()),
					ms(r.attach), ms(r.resume), s.DirtyPages, float64(s.Bytes)/(1<<20), dirty.DescribeBySource(s.BySource), float64(r.writeBack)/(1<<20),
					ms(p.Duration), float64(p.Bytes)/(1<<20), r.rep.HashRate/1e9, r.same)
				if !r.same {
					return fmt.Errorf("%s: destination memory differs from the source's", strat)
				}
			}
		}
		tw.Flush() // each size's rows as soon as they are done
	}
	return tw.Flush()
}

// prefill gives a fraction of the pages seeded nonzero content, on all CPUs.
func prefill(mem []byte, frac float64, seed int64) {
	pages := len(mem) / 4096
	workers := 16
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for p := w; p < pages; p += workers {
				h := uint64(p)*0x9e3779b97f4a7c15 ^ uint64(seed)
				if float64(h>>11)/float64(1<<53) >= frac {
					continue
				}
				pg := mem[p*4096 : (p+1)*4096]
				for i := 0; i < 4096; i += 8 {
					h ^= h << 13
					h ^= h >> 7
					h ^= h << 17
					le64(pg[i:], h)
				}
			}
		})
	}
	wg.Wait()
}

func le64(b []byte, v uint64) {
	_ = b[7]
	for i := range 8 {
		b[i] = byte(v >> (8 * i))
	}
}

// equalParallel compares two memories on several goroutines.
func equalParallel(a, b []byte) bool {
	if len(a) != len(b) {
		return false
	}
	const chunk = 64 << 20
	var wg sync.WaitGroup
	var mu sync.Mutex
	same := true
	sem := make(chan struct{}, 16)
	for off := 0; off < len(a); off += chunk {
		end := min(off+chunk, len(a))
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if !bytes.Equal(a[off:end], b[off:end]) {
				mu.Lock()
				same = false
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return same
}

func downtimeRun(ctx context.Context, log zerolog.Logger, size uint64, frac float64, strat string, share float64, seed int64) (r dtResult, err error) {
	r = dtResult{size: size, frac: frac, strategy: strat}
	src, err := newHost(size + 1<<20)
	if err != nil {
		return
	}
	defer src.close()
	dst, err := newHost(size)
	if err != nil {
		return
	}
	defer dst.close()
	nb, err := vgpu.New(vgpu.Config{Name: "neighbour", MemSize: 1 << 20}, src.pool, log)
	if err != nil {
		return
	}
	defer nb.Close()
	v, err := vgpu.New(vgpu.Config{Name: "dt", MemSize: size, Backend: vgpu.BackendCUDA}, src.pool, log)
	if err != nil {
		return
	}
	defer v.Close()
	prefill(v.Memory(), 0.75, seed)
	dv, err := vgpu.New(vgpu.Config{Name: "dt", MemSize: size, Backend: vgpu.BackendCUDA}, dst.pool, log)
	if err != nil {
		return
	}
	defer dv.Close()
	path, stopSrc, err := src.serve(v)
	if err != nil {
		return
	}
	defer stopSrc()
	bus, err := sim.Attach(path, sim.Options{NoIRQ: true})
	if err != nil {
		return
	}
	defer func() { bus.Close() }()
	d, err := guest.Open(bus, guest.Options{Seed: seed})
	if err != nil {
		return
	}
	// The guest's GPU buffers: half the dirty bytes, at most what its GTT
	// maps less room for the ring and staging; a 1024x1024 framebuffer.
	target := uint64(frac * float64(size))
	gpuBytes := min(target/2, d.MappedSize()/2) &^ 0xfff
	const fbSide = 1024
	fbBytes := uint64(4 * fbSide * fbSide)
	var fill, fb uint64
	if gpuBytes > fbBytes {
		if fill, err = d.Alloc(gpuBytes - fbBytes); err != nil {
			return
		}
	}
	if gpuBytes >= fbBytes {
		if fb, err = d.Alloc(fbBytes); err != nil {
			return
		}
		if err = d.LoadKernel(3, abi.KernelRender); err != nil {
			return
		}
	}
	if err = d.Sync(ctx); err != nil {
		return
	}

	a, b, err := loopback()
	if err != nil {
		return
	}
	defer a.Close()
	defer b.Close()
	recv := make(chan error, 1)
	go func() {
		_, err := precopy.Receive(ctx, b, dv, precopy.Options{Log: log})
		recv <- err
	}()
	opts := precopy.Options{Strategy: precopy.OneShot, Log: log}
	switch strat {
	case "oneshot":
	case "stopcopy":
		opts.Strategy = precopy.StopCopy
	case "oneshot+gpu", "oneshot+split":
		h, herr := v.GPU().PageHasher()
		if herr != nil {
			err = herr
			return
		}
		defer h.Close()
		opts.Hasher = h
		if strat == "oneshot+split" {
			cpu, herr := dirty.NewCPUHasher(v.Memory(), 0)
			if herr != nil {
				err = herr
				return
			}
			opts.Hasher = dirty.SplitHasher(cpu, h, share, int(size/4096))
		}
	default:
		err = fmt.Errorf("unknown strategy %q", strat)
		return
	}
	s, err := precopy.NewSource(v, a, opts)
	if err != nil {
		return
	}
	fail := func(e error) error {
		s.Rollback()
		a.Close()
		<-recv
		return e
	}
	if err = s.Precopy(ctx); err != nil {
		err = fail(err)
		return
	}
	// The guest runs on and dirties memory: GPU commands (a fenced FILL, an
	// unfenced RENDER whose output is still on the device at the pause),
	// then CPU stores through the aperture.
	if fill != 0 {
		if err = d.Fill(fill, gpuBytes-fbBytes, 0x5a5a0000|uint32(seed)); err != nil {
			return
		}
		if err = d.Sync(ctx); err != nil {
			return
		}
	}
	if fb != 0 {
		if err = d.Render(3, fbSide, fbSide, fb, 7); err != nil {
			return
		}
		if err = d.Flush(); err != nil {
			return
		}
		if err = waitIdle(ctx, bus); err != nil {
			return
		}
	}
	r.gpuBytes = gpuBytes
	ap := bus.Aperture()
	rng := rand.New(rand.NewPCG(uint64(seed), uint64(size)))
	cpuPages := int((target - gpuBytes) / 4096)
	for range cpuPages {
		p := rng.IntN(int(size / 4096))
		le64(ap[p*4096+8*rng.IntN(512):], rng.Uint64())
	}
	r.cpuPages = cpuPages
	before := v.GPU().Stats().WriteBackBytes

	// Pause: the guest stops issuing anything; from here to resume is
	// the downtime.
	tPause := time.Now()
	if r.rep, err = s.Stop(ctx); err != nil {
		err = fail(err)
		return
	}
	if err = <-recv; err != nil {
		return
	}
	tStopped := time.Now()
	r.writeBack = v.GPU().Stats().WriteBackBytes - before
	s.Close()
	dpath, stopDst, err := dst.serve(dv)
	if err != nil {
		return
	}
	defer stopDst()
	ram := bus.RAMFile()
	bus2, err := sim.Attach(dpath, sim.Options{NoIRQ: true, RAM: ram})
	if err != nil {
		return
	}
	if err = d.Rebind(bus2); err != nil {
		bus2.Close()
		return
	}
	tAttached := time.Now()
	dv.Resume()
	tResumed := time.Now()
	r.attach, r.resume = tAttached.Sub(tStopped), tResumed.Sub(tAttached)
	r.total = tResumed.Sub(tPause)
	old := bus
	bus = bus2
	old.Close()
	stopSrc()

	// Both memories must be equal (the source's is frozen since the
	// stop), then the guest goes on on the destination.
	r.same = equalParallel(v.Memory(), dv.Memory())
	err = d.Sync(ctx)
	return
}

// waitIdle polls the device until its ring is empty (STATUS.BUSY clear),
// as a guest does not: it makes the unfenced work finish before the pause
// so the stop has it pending on the device.
func waitIdle(ctx context.Context, bus *sim.Bus) error {
	for ctx.Err() == nil {
		st, err := bus.ReadReg32(abi.RegStatus)
		if err != nil {
			return err
		}
		if st&abi.StatusBusy == 0 {
			return nil
		}
	}
	return ctx.Err()
}
