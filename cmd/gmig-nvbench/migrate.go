package main

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/internal/cmdline"
	"github.com/gmig-dev/gmig/internal/inproc"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/precopy"
	"github.com/gmig-dev/gmig/vgpu"
)

// cmdMigrate migrates vGPUs on the CUDA back end between two gmigd hosts
// in this process (internal/inproc: two pools, two device mirrors on the
// one GPU, or one on each of two GPUs with -gpus SRC,DST, the
// orchestrator's sequence exactly as `gmigd migrate` runs it), first under the seeded workload (every step checked against its
// model; the final digest against a run never migrated, on the software
// back end), then for the downtime matrix (downtime.go).
func cmdMigrate(args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	wmem := cmdline.ByteSize(256 << 20)
	fs.Var(&wmem, "workload-mem", "vGPU size for the workload migrations")
	steps := fs.Int("steps", 400, "workload steps (pre-copy from a quarter, the VM stops in the middle)")
	seed := fs.Int64("seed", 1, "seed")
	msizes := sizes{1 << 30, 4 << 30, 16 << 30}
	fs.Var(&msizes, "sizes", "vGPU sizes for the downtime matrix")
	fracs := fs.String("dirty", "0.001,0.01,0.1", "what the guest dirties between the pre-copy and the pause, comma-separated: fractions of the pages (0.01), or sizes (16M: the same dirty bytes at every size)")
	tracking := fs.String("tracking", "on", "the log of the guest's aperture writes: on (as gmigd migrate), off (the stop phase hashes every page), or both (each strategy but stopcopy twice, then the two side by side)")
	skipWorkload := fs.Bool("skip-workload", false, "only the downtime matrix")
	skipDowntime := fs.Bool("skip-downtime", false, "only the workload migrations")
	strats := fs.String("strategies", "oneshot,oneshot+gpu,oneshot+split,stopcopy",
		"downtime strategies: oneshot (final scan on the CPU workers), oneshot+gpu (on the GPU), oneshot+split (both at once), stopcopy")
	gpuShare := fs.Float64("gpu-share", 0.4, "oneshot+split: the GPU's share of the pages")
	logLevel := fs.String("log-level", "warn", "log level")
	gpuFlag := fs.String("gpus", "", "the source's and the destination's GPU, SRC,DST: an index or a UUID as gmigd status lists them (empty: CUDA's first GPU; one: both on it)")
	roundTrip := fs.Bool("round-trip", false, "each workload migration goes to the destination and back, both under the workload")
	if err := fs.Parse(args); err != nil {
		return err
	}
	log, err := cmdline.NewLogger(*logLevel)
	if err != nil {
		return err
	}
	if _, err := openGPU(); err != nil {
		return err
	}
	gp, err := parseGPUs(*gpuFlag)
	if err != nil {
		return err
	}
	fmt.Println("migrations:", gp)
	fr, err := parseDirty(*fracs)
	if err != nil {
		return err
	}
	modes, err := parseTracking(*tracking)
	if err != nil {
		return err
	}
	ctx := context.Background()
	if !*skipWorkload {
		if err := workloadMigrations(ctx, log, gp, *roundTrip, uint64(wmem), *steps, *seed); err != nil {
			return err
		}
	}
	if *skipDowntime {
		return nil
	}
	return downtimeMatrix(ctx, os.Stdout, log, gp, msizes, fr, strings.Split(*strats, ","), modes, *gpuShare, *seed)
}

// cudaVGPU is the configuration of the migrated vGPUs.
func cudaVGPU(name string, mem uint64) vgpu.Config {
	return vgpu.Config{Name: name, MemSize: mem, Backend: vgpu.BackendCUDA}
}

// newPair starts the two hosts for a vGPU of mem bytes, on gp's GPUs,
// with a 1 MiB neighbour on the source, so the vGPU sits at another pool
// offset on each side and the remapping is real.
func newPair(mem uint64, gp gpuPair, log zerolog.Logger) (*inproc.Pair, error) {
	p, err := inproc.NewOnGPUs(mem+(2<<20), gp.sel, log, nil)
	if err != nil {
		return nil, err
	}
	if _, err := p.Hosts[0].Create(vgpu.Config{Name: "neighbour", MemSize: 1 << 20}); err != nil {
		p.Close()
		return nil, err
	}
	return p, nil
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// workloadMigrations: the reference digest on the software back end, then
// one migration per strategy between two CUDA vGPUs, the VM stopped at the
// same operation each time.
func workloadMigrations(ctx context.Context, log zerolog.Logger, gp gpuPair, roundTrip bool, mem uint64, steps int, seed int64) error {
	wcfg := guest.WorkloadConfig{MemSize: mem / 4, Check: true}
	startAt, pauseAt := uint64(steps/4), uint64(steps/2)
	fmt.Printf("\n== workload migrations: %s vGPUs, workload on %s (checked against its model every step), seed %d, %d steps, pre-copy from step %d, VM stops after step %d\n",
		fmtSize(mem), fmtSize(wcfg.MemSize), seed, steps, startAt, pauseAt)
	ref, err := inproc.ReferenceDigest(ctx, mem, 0, seed, wcfg, steps, log)
	if err != nil {
		return err
	}
	fmt.Printf("reference (software back end, never migrated): digest %s\n", hex.EncodeToString(ref[:8]))
	for _, st := range []precopy.Strategy{precopy.OneShot, precopy.Iterative, precopy.StopCopy} {
		r, err := workloadMigrateOnce(ctx, log, gp, roundTrip, mem, wcfg, steps, seed, st, startAt, pauseAt)
		if err != nil {
			return fmt.Errorf("%s: %w", st, err)
		}
		verdict := "EQUAL to the reference"
		if r.sum != ref {
			verdict = "DIFFERS from the reference"
		}
		s := r.rep.Precopy.Stop
		fmt.Printf("%-9s source pool offset %#x -> destination %#x: stop %.2f ms (%d pages at the stop, %s), downtime %.2f ms",
			st, r.srcOff, r.dstOff, ms(s.Total), s.DirtyPages, dirty.DescribeBySource(s.BySource), ms(r.rep.Downtime))
		if roundTrip {
			b := r.back.Precopy.Stop
			fmt.Printf("; and back: stop %.2f ms (%d pages), downtime %.2f ms", ms(b.Total), b.DirtyPages, ms(r.back.Downtime))
		}
		fmt.Printf("; final digest %s %s\n", hex.EncodeToString(r.sum[:8]), verdict)
		if r.sum != ref {
			return fmt.Errorf("%s: digest %x, reference %x", st, r.sum, ref)
		}
	}
	return nil
}

// workloadRun is one workload migration.
type workloadRun struct {
	rep            orchestrator.Report
	back           orchestrator.Report // the way back (-round-trip)
	sum            [32]byte            // the workload's digest at its end, on the destination
	srcOff, dstOff uint64              // the vGPU's pool offsets
}

// workloadMigrateOnce runs the workload on a CUDA vGPU, pre-copies from
// step startAt, pauses the VM at the first operation boundary after step
// pauseAt (the workload is deterministic wherever it stops), migrates it
// through the orchestrator and lets it finish on the destination. With
// roundTrip the workload waits, running, halfway through what is left,
// and the VM migrates back from there, the rest of the workload running
// under that migration. Each side's vGPU must run on its GPU of gp.
func workloadMigrateOnce(ctx context.Context, log zerolog.Logger, gp gpuPair, roundTrip bool, mem uint64, wcfg guest.WorkloadConfig, steps int, seed int64,
	st precopy.Strategy, startAt, pauseAt uint64) (r workloadRun, err error) {
	p, err := newPair(mem, gp, log)
	if err != nil {
		return r, err
	}
	defer p.Close()
	hold := func(vm *sim.VM) (<-chan struct{}, error) { return vm.HoldAt(pauseAt, 1) }
	vm, info, err := p.StartVM(p.Hosts[0], cudaVGPU("wl", mem), 0, seed, wcfg, hold)
	if err != nil {
		return r, err
	}
	defer vm.Close()
	r.srcOff = info.PoolOffset
	if err := onGPU(p, gp, 0); err != nil {
		return r, err
	}
	stopBeat := vm.StartHeartbeat(time.Millisecond) // the guest-observed gap, and the destination's wait for a first beat
	defer stopBeat()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	paced := vm.Pace(startAt)
	go func() { done <- vm.Run(ctx, steps) }()
	select {
	case <-paced:
	case err := <-done:
		return r, fmt.Errorf("the workload ended (%v) before the migration", err)
	}
	halfway := make(chan (<-chan struct{}), 1) // -round-trip: the workload waits there for the way back
	var live sync.Once
	r.rep, err = p.Migrate(ctx, 0, "wl", hostd.MigrateOptions{
		Precopy: precopy.Options{Strategy: st, Log: log},
		Progress: func(pr orchestrator.Progress) {
			if pr.Phase == orchestrator.PhaseVGPULive {
				live.Do(func() {
					limit := uint64(0) // the workload runs on to the hold, and on
					if roundTrip {
						limit = (pauseAt + uint64(steps)) / 2
					}
					halfway <- vm.Pace(limit)
				})
			}
		},
	})
	if err != nil {
		cancel()
		vm.Resume()
		<-done
		return r, err
	}
	if err := onGPU(p, gp, 1); err != nil {
		return r, err
	}
	dst, err := p.Hosts[1].Get("wl")
	if err != nil {
		return r, err
	}
	r.dstOff = dst.PoolOffset
	if roundTrip {
		select {
		case <-<-halfway:
		case err := <-done:
			return r, fmt.Errorf("the workload ended (%v) before the way back", err)
		}
		var once sync.Once
		r.back, err = p.Migrate(ctx, 1, "wl", hostd.MigrateOptions{
			Precopy: precopy.Options{Strategy: st, Log: log},
			Progress: func(pr orchestrator.Progress) {
				if pr.Phase == orchestrator.PhaseVGPULive {
					once.Do(func() { vm.Pace(0) }) // the rest of the workload runs under the migration
				}
			},
		})
		if err != nil {
			cancel()
			<-done
			return r, fmt.Errorf("the way back: %w", err)
		}
		if err := onGPU(p, gp, 0); err != nil {
			return r, err
		}
	}
	if err := <-done; err != nil {
		return r, fmt.Errorf("workload after the migration: %w", err)
	}
	r.sum, err = vm.Digest()
	return r, err
}

// onGPU checks that host side (0 source, 1 destination) of p has vGPU
// "wl" on its GPU of gp.
func onGPU(p *inproc.Pair, gp gpuPair, side int) error {
	v, err := p.Hosts[side].VGPU("wl")
	if err != nil {
		return err
	}
	return gp.check(side, v)
}
