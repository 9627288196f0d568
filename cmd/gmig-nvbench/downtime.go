package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/internal/inproc"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/precopy"
	"github.com/gmig-dev/gmig/vgpu"
)

// prefillFraction is the share of a downtime vGPU's pages that hold data
// before the guest starts (resident textures and weights).
const prefillFraction = 0.75

// fbSide is the side of the guest's framebuffer in pixels (1024 x 1024,
// 4 MiB of RGBA8).
const fbSide = 1024

// dtResult is one downtime run.
type dtResult struct {
	rep       orchestrator.Report
	attach    time.Duration // the stop phase's end to the engine's run: switchover, commit, the VM's load and front end, the commit record
	resume    time.Duration // the engine and the VM told to run
	same      bool          // the destination's memory equals a never-migrated run's
	writeBack uint64        // bytes the source wrote back from the device at quiesce
}

// downtimeMatrix runs every size x dirty amount x strategy x tracking
// mode, printing each size's rows as they are done, then the write log
// beside the full hash where both ran.
func downtimeMatrix(ctx context.Context, out io.Writer, log zerolog.Logger, gp gpuPair, ss []uint64, fracs []dirtyAmount, strats []string, modes []bool, share float64, seed int64) error {
	fmt.Fprintf(out, "\n== downtime: CUDA back end on both sides, %.0f%% of pages hold data before the guest starts; after the pre-copy the guest dirties a fraction of pages (GPU FILL+RENDER through the ring, half, at most what its GTT maps; CPU stores through the aperture outside the framebuffer, the rest), then pauses. Downtime = pause to resume of the guest, through the orchestrator as gmigd migrate runs it: stop phase (quiesce incl. device write-back, scan, transfer, restore, replay, other) + attach (switchover, commit, the destination VM's load and front end, commit record) + resume (engine, VM). Loopback TCP; the stop phase's pages go on the default number of streams as gmigd migrate sends them (%d here: half the cores, at most %d; the streams column), and the guest's aperture stores are logged as gmigd migrate logs them (the tracking column: the log, and the pages it had written at the stop; +hash: without it, every page hashed). Memory equal: the destination's pages against a run never migrated (software back end).\n", 100*prefillFraction, precopy.DefaultStreams(), precopy.MaxDefaultStreams)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	var rows []dtRow
	fmt.Fprintln(tw, "size\tdirty\tstrategy\tdowntime ms\tquiesce\tscan\ttransfer\trestore\treplay\tother\tattach\tresume\tstop pages\tstop MiB\tby source\twrite-back MiB\tpre-copy ms\tpre MiB\tscan GB/s\tmemory equal\tstreams\ttracking\t")
	for _, size := range ss {
		for _, f := range fracs {
			want, err := referencePages(ctx, log, size, f, seed)
			if err != nil {
				return fmt.Errorf("%s, dirty %s, reference: %w", fmtSize(size), f, err)
			}
			for _, strat := range strats {
				for _, track := range modes {
					if !track && strat == "stopcopy" && len(modes) > 1 {
						continue // stop-and-copy hashes nothing: once
					}
					r, err := downtimeRun(ctx, log, gp, size, f, strat, share, seed, want, !track)
					if err != nil {
						return fmt.Errorf("%s, dirty %s, %s: %w", fmtSize(size), f, strat, err)
					}
					label := strat
					if !track {
						label += "+hash"
					}
					rows = append(rows, dtRow{size: size, dirty: f, strat: strat, track: track, r: r})
					p, s := r.rep.Precopy.Precopy, r.rep.Precopy.Stop
					fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t%.1f\t%s\t%.1f\t%.0f\t%.0f\t%.1f\t%v\t%d\t%s\t\n",
						fmtSize(size), f, label, ms(r.rep.Downtime), ms(s.Quiesce), ms(s.Scan), ms(s.Transfer), ms(s.Restore), ms(s.Replay), ms(s.Other()),
						ms(r.attach), ms(r.resume), s.DirtyPages, float64(s.Bytes)/(1<<20), dirty.DescribeBySource(s.BySource), float64(r.writeBack)/(1<<20),
						ms(p.Duration), float64(p.Bytes)/(1<<20), r.rep.Precopy.HashRate/1e9, r.same,
						max(1, s.Streams), r.rep.Precopy.TrackingLine())
					if !r.same {
						return fmt.Errorf("%s: the destination's memory differs from a run never migrated", label)
					}
				}
			}
		}
		tw.Flush() // each size's rows as soon as they are done
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	return writeTrackingTable(out, rows)
}

// dirtier is the guest's part of a downtime run: buffers set up before
// the migration, writes between the pre-copy and the pause.
type dirtier struct {
	size, target, gpuBytes uint64 // vGPU bytes; bytes to dirty; of those, by GPU commands
	fill, fb               uint64 // graphics addresses of the FILL region and the framebuffer (0: none)
	seed                   int64
}

// newDirtier plans to dirty amount of a vGPU of size bytes: half by GPU
// commands, at most half of what the guest's GTT maps (less room for the
// ring and staging), with a framebuffer among them, the rest by CPU stores.
func newDirtier(size uint64, amount dirtyAmount, seed int64) *dirtier {
	target := amount.bytesOf(size)
	return &dirtier{size: size, target: target, gpuBytes: target / 2 &^ (abi.PageSize - 1), seed: seed}
}

// setup allocates the guest's GPU buffers and loads the render kernel.
func (w *dirtier) setup(ctx context.Context, d *guest.Driver) error {
	w.gpuBytes = min(w.gpuBytes, d.MappedSize()/2) &^ (abi.PageSize - 1)
	fbBytes := uint64(4 * fbSide * fbSide)
	var err error
	if w.gpuBytes > fbBytes {
		if w.fill, err = d.Alloc(w.gpuBytes - fbBytes); err != nil {
			return err
		}
	}
	if w.gpuBytes >= fbBytes {
		if w.fb, err = d.Alloc(fbBytes); err != nil {
			return err
		}
		if err = d.LoadKernel(3, abi.KernelRender); err != nil {
			return err
		}
	}
	return d.Sync(ctx)
}

// dirty writes: a fenced FILL, an unfenced RENDER whose output is still
// on the device at the pause, then CPU stores through the aperture, on
// pages other than the framebuffer's (a guest does not store into a
// frame being rendered without a fence: the result would depend on the
// race).
func (w *dirtier) dirty(ctx context.Context, d *guest.Driver) error {
	fbBytes := uint64(4 * fbSide * fbSide)
	if w.fill != 0 {
		if err := d.Fill(w.fill, w.gpuBytes-fbBytes, 0x5a5a0000|uint32(w.seed)); err != nil {
			return err
		}
		if err := d.Sync(ctx); err != nil {
			return err
		}
	}
	fbPages := map[uint64]bool{}
	if w.fb != 0 {
		if err := d.Render(3, fbSide, fbSide, w.fb, 7); err != nil {
			return err
		}
		if err := d.Flush(); err != nil {
			return err
		}
		if err := waitIdle(ctx, d.Bus()); err != nil {
			return err
		}
		for ga := w.fb; ga < w.fb+fbBytes; ga += abi.PageSize {
			off, err := d.ApertureOffset(ga)
			if err != nil {
				return err
			}
			fbPages[off/abi.PageSize] = true
		}
	}
	ap := d.Bus().Aperture()
	rng := rand.New(rand.NewPCG(uint64(w.seed), w.size))
	pages := int(w.size / abi.PageSize)
	for range int((w.target - w.gpuBytes) / abi.PageSize) {
		p := rng.IntN(pages)
		for fbPages[uint64(p)] {
			p = rng.IntN(pages)
		}
		binary.LittleEndian.PutUint64(ap[p*abi.PageSize+8*rng.IntN(abi.PageSize/8):], rng.Uint64())
	}
	return nil
}

// waitIdle polls the device until its ring is empty (STATUS.BUSY clear),
// as a guest does not: it makes the unfenced work finish before the pause
// so the stop has it pending on the device.
func waitIdle(ctx context.Context, bus guest.Bus) error {
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

// referencePages is the hash of every page of a vGPU of size bytes after
// the same prefill and the same guest writes, on the software back end,
// never migrated: what a destination's memory must equal.
func referencePages(ctx context.Context, log zerolog.Logger, size uint64, frac dirtyAmount, seed int64) ([]uint64, error) {
	p, err := inproc.New(size+(2<<20), log, nil)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	vm, _, err := p.StartVM(p.Hosts[0], vgpu.Config{Name: "reference", MemSize: size}, prefillFraction, seed, guest.WorkloadConfig{}, nil)
	if err != nil {
		return nil, err
	}
	defer vm.Close()
	w := newDirtier(size, frac, seed)
	d := vm.Driver()
	if err := w.setup(ctx, d); err != nil {
		return nil, err
	}
	if err := w.dirty(ctx, d); err != nil {
		return nil, err
	}
	if err := waitIdle(ctx, d.Bus()); err != nil {
		return nil, err
	}
	v, err := p.Hosts[0].VGPU("reference")
	if err != nil {
		return nil, err
	}
	return pageHashes(v.Memory())
}

// pageHashes hashes every page of mem on every CPU.
func pageHashes(mem []byte) ([]uint64, error) {
	h, err := dirty.NewCPUHasher(mem, 0)
	if err != nil {
		return nil, err
	}
	out := make([]uint64, len(mem)/abi.PageSize)
	return out, h.HashPages(nil, out)
}

// hashers returns the stop phase's hasher for strat on the source vGPU v
// (nil: the CPU workers) and what closes it.
func hashers(strat string, v *vgpu.VGPU, share float64) (precopy.Options, func(), error) {
	opts := precopy.Options{Strategy: precopy.OneShot}
	switch strat {
	case "oneshot":
	case "stopcopy":
		opts.Strategy = precopy.StopCopy
	case "oneshot+gpu", "oneshot+split":
		h, err := v.GPU().PageHasher()
		if err != nil {
			return opts, nil, err
		}
		opts.Hasher = h
		if strat == "oneshot+split" {
			cpu, err := dirty.NewCPUHasher(v.Memory(), 0)
			if err != nil {
				h.Close()
				return opts, nil, err
			}
			opts.Hasher = dirty.SplitHasher(cpu, h, share, int(v.Config().MemSize/abi.PageSize))
		}
		return opts, func() { h.Close() }, nil
	default:
		return opts, nil, fmt.Errorf("unknown strategy %q", strat)
	}
	return opts, func() {}, nil
}

// downtimeRun migrates a CUDA vGPU of size bytes whose guest dirties frac
// of it between the pre-copy and the pause, through the orchestrator
// (with noTracking, without the log of the guest's writes), and compares
// the destination's pages with want.
func downtimeRun(ctx context.Context, log zerolog.Logger, gp gpuPair, size uint64, frac dirtyAmount, strat string, share float64, seed int64, want []uint64, noTracking bool) (r dtResult, err error) {
	p, err := newPair(size, gp, log)
	if err != nil {
		return r, err
	}
	defer p.Close()
	dirtied := make(chan struct{})
	hold := func(*sim.VM) (<-chan struct{}, error) { return dirtied, nil } // the pause waits for the guest's writes
	vm, _, err := p.StartVM(p.Hosts[0], cudaVGPU("dt", size), prefillFraction, seed, guest.WorkloadConfig{}, hold)
	if err != nil {
		return r, err
	}
	defer vm.Close()
	stopBeat := vm.StartHeartbeat(time.Millisecond) // the guest-observed gap, and the destination's wait for a first beat
	defer stopBeat()
	w := newDirtier(size, frac, seed)
	if err := w.setup(ctx, vm.Driver()); err != nil {
		return r, err
	}
	src, err := p.Hosts[0].VGPU("dt")
	if err != nil {
		return r, err
	}
	if err := gp.check(0, src); err != nil {
		return r, fmt.Errorf("the source: %w", err)
	}
	opts, closeHasher, err := hashers(strat, src, share)
	if err != nil {
		return r, err
	}
	defer closeHasher()
	opts.Log = log
	gpu := src.GPU()
	var once [2]sync.Once
	var before, after atomic.Uint64 // the source's write-back counter before the pause and after the stop phase
	dirtyErr := make(chan error, 1)
	r.rep, err = p.Migrate(ctx, 0, "dt", hostd.MigrateOptions{Precopy: opts, NoTracking: noTracking, Progress: func(pr orchestrator.Progress) {
		switch pr.Phase {
		case orchestrator.PhaseVMMLive: // the vGPU's pre-copy is done: the guest writes, then pauses
			once[0].Do(func() {
				go func() {
					err := w.dirty(ctx, vm.Driver())
					before.Store(gpu.Stats().WriteBackBytes)
					dirtyErr <- err
					close(dirtied)
				}()
			})
		case orchestrator.PhaseSwitchover: // the stop phase is done
			once[1].Do(func() { after.Store(gpu.Stats().WriteBackBytes) })
		}
	}})
	if err != nil {
		return r, err
	}
	if err := <-dirtyErr; err != nil {
		return r, fmt.Errorf("the guest's writes: %w", err)
	}
	r.writeBack = after.Load() - before.Load()
	r.attach = termsSum(r.rep, orchestrator.TermSwitchover, orchestrator.TermCommit, orchestrator.TermLoad, orchestrator.TermFrontEnd, orchestrator.TermRecord)
	r.resume = termsSum(r.rep, orchestrator.TermEngine, orchestrator.TermResume)
	dst, err := p.Hosts[1].VGPU("dt")
	if err != nil {
		return r, err
	}
	if err := gp.check(1, dst); err != nil {
		return r, fmt.Errorf("the destination: %w", err)
	}
	got, err := pageHashes(dst.Memory())
	if err != nil {
		return r, err
	}
	r.same = slices.Equal(got, want)
	// The guest goes on on the destination.
	return r, vm.Driver().Sync(ctx)
}

// termsSum is the sum of the report's named terms.
func termsSum(rep orchestrator.Report, names ...string) time.Duration {
	var d time.Duration
	for _, n := range names {
		d += rep.Term(n)
	}
	return d
}
