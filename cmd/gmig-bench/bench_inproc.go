package main

import (
	"context"
	"encoding/hex"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/internal/inproc"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/precopy"
	"github.com/gmig-dev/gmig/vgpu"
)

// benchTimeline is where a case's workload migrates: it runs to startAt
// steps, the migration starts, the workload runs on (the live phase) and
// waits at operation pauseOp of step pauseAt — the pause point, the same
// for every strategy — where the VM pauses once the live phase has ended;
// it finishes all steps on the destination.
type benchTimeline struct {
	StartAt uint64 `json:"start_step"`
	PauseAt uint64 `json:"pause_step"`
	PauseOp int    `json:"pause_op"`
	Steps   int    `json:"steps"`
}

// timeline places a case's migration. The mix runs unpaced: -steps, the
// migration from a quarter, the pause at half, at a seeded operation.
// A paced profile: -warmup, then -hold of guest time before the pause
// point (by default enough for the live phase of mem on a slow machine),
// then a quarter second.
func (c *benchConfig) timeline(w guest.WorkloadConfig, mem uint64) benchTimeline {
	paced := w.FPS > 0 || w.FPS == 0 && w.Profile != guest.ProfileMixed
	if !paced {
		pauseOp := 1 + rand.New(rand.NewPCG(uint64(c.seed), 0x7061757365)).IntN(6) // "pause"
		if w.Profile != guest.ProfileMixed {
			pauseOp = 2
		}
		return benchTimeline{StartAt: uint64(c.steps / 4), PauseAt: uint64(c.steps / 2), PauseOp: pauseOp, Steps: c.steps}
	}
	fps := w.FPS
	if fps <= 0 {
		fps = guest.DefaultFPS
	}
	hold := c.hold
	if hold == 0 {
		rate := c.holdRate
		if rate <= 0 {
			rate = 200
		}
		hold = 500*time.Millisecond + time.Duration(float64(mem)/(rate*(1<<20))*float64(time.Second))
	}
	steps := func(d time.Duration) uint64 { return uint64(math.Ceil(d.Seconds() * fps)) }
	t := benchTimeline{StartAt: max(2, steps(c.warmup)), PauseOp: 2}
	t.PauseAt = t.StartAt + max(2, steps(hold))
	t.Steps = int(t.PauseAt + max(4, steps(250*time.Millisecond)))
	if w.Profile == guest.ProfileIdle {
		t.PauseOp = 1 // an idle step has only its fence
	}
	return t
}

// refDigests caches reference digests: a workload's region after its
// steps, on a vGPU that never moves (the same for any vGPU size, frame
// rate or prefill: the workload's trace depends on neither).
type refDigests struct {
	mu sync.Mutex
	m  map[string][32]byte
}

var references refDigests

func (r *refDigests) get(ctx context.Context, c *benchConfig, w guest.WorkloadConfig, steps int) ([32]byte, error) {
	w.Unpaced, w.Fill = true, 0
	key := fmt.Sprintf("%s/%d/%d", w.Spec(), c.seed, steps)
	r.mu.Lock()
	d, ok := r.m[key]
	r.mu.Unlock()
	if ok {
		return d, nil
	}
	mem := uint64(256 << 20)
	d, err := inproc.ReferenceDigest(ctx, mem, 0, c.seed, w, steps, c.log)
	if err != nil {
		return d, err
	}
	r.mu.Lock()
	if r.m == nil {
		r.m = map[string][32]byte{}
	}
	r.m[key] = d
	r.mu.Unlock()
	return d, nil
}

// runInProcCase migrates one case with every variant, runs times each.
func (c *benchConfig) runInProcCase(ctx context.Context, bc benchCase, n *int, total int) ([]benchResult, error) {
	tl := c.timeline(bc.cfg, bc.Mem)
	var want [32]byte
	if bc.Burst != nil {
		c.statusf("== %s: measuring this machine's rates\n", bc)
	} else {
		c.statusf("== %s: measuring this machine's rates; reference digest (%d steps)\n", bc, tl.Steps)
	}
	rates, err := measureRates(c.workerCount())
	if err != nil {
		return nil, err
	}
	if bc.Burst == nil {
		if want, err = references.get(ctx, c, bc.cfg, tl.Steps); err != nil {
			return nil, err
		}
	}
	var out []benchResult
	for _, v := range c.variants() {
		for r := 1; r <= c.runs; r++ {
			*n++
			var res benchResult
			if bc.Burst != nil {
				c.statusf("[%d/%d] %s, %s run %d: fill, migrate, the guest's stores once the pre-copy is done, pause ...\n", *n, total, bc, v, r)
				res, err = c.migrateBurst(ctx, bc, v)
			} else {
				c.statusf("[%d/%d] %s, %s run %d: fill, warm-up to step %d, migrate, pause at step %d op %d ...\n",
					*n, total, bc, v, r, tl.StartAt, tl.PauseAt, tl.PauseOp)
				res, err = c.migrateInProc(ctx, bc, v, tl, want)
			}
			res.Run, res.Rates = r, rates
			res.finish()
			out = append(out, res)
			if err != nil {
				return out, fmt.Errorf("%s run %d: %w", v, r, err)
			}
			c.statusf("    %s\n", res.summary())
		}
	}
	return out, nil
}

// migrateInProc runs the case's workload on a fresh source host, migrates
// it with variant v to a fresh destination host through the orchestrator
// (hostd.Host.MigrateVM), lets it finish there and checks its digest.
func (c *benchConfig) migrateInProc(ctx context.Context, bc benchCase, v benchVariant, tl benchTimeline, want [32]byte) (benchResult, error) {
	res := benchResult{Case: bc, Variant: v.String(), Strategy: v.Strategy, Timeline: tl, FullHash: v.FullHash,
		RateAsked: float64(bc.cfg.StepPages()) * fpsOf(bc.cfg) / 256}
	p, err := inproc.New(bc.Mem+(32<<20), c.log, nil)
	if err != nil {
		return res, err
	}
	defer p.Close()
	// A neighbour on the source host, so the vGPU sits at another pool
	// offset on each side and the remapping is real.
	if _, err := p.Hosts[0].Create(vgpu.Config{Name: "neighbour", MemSize: 1 << 20}); err != nil {
		return res, err
	}
	var holdCh <-chan struct{}
	hold := func(vm *sim.VM) (<-chan struct{}, error) {
		ch, err := vm.HoldAt(tl.PauseAt, tl.PauseOp)
		holdCh = ch
		return ch, err
	}
	vm, _, err := p.StartVM(p.Hosts[0], vgpu.Config{Name: "bench", MemSize: bc.Mem}, 0, c.seed, bc.cfg, hold)
	if err != nil {
		return res, err
	}
	defer vm.Close()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	held := heldAt(ctx, vm, holdCh)
	stopBeat := vm.StartHeartbeat(time.Millisecond)
	defer stopBeat()
	done := make(chan error, 1)
	paced := vm.Pace(tl.StartAt)
	go func() { done <- vm.Run(ctx, tl.Steps) }()
	select {
	case <-paced:
	case err := <-done:
		return res, fmt.Errorf("the workload ended (%v) before the migration", err)
	}
	var atLive guest.WorkloadStats
	var liveEnd time.Time
	rep, err := p.Migrate(ctx, 0, "bench", hostd.MigrateOptions{
		Precopy:    precopy.Options{Strategy: v.Strategy, BackgroundRate: c.bgRate, Workers: c.workers, SerialStop: v.Serial, Streams: c.streams},
		NoTracking: v.FullHash,
		Progress: func(pr orchestrator.Progress) {
			switch pr.Phase {
			case orchestrator.PhaseVGPULive:
				atLive = vm.Workload().Stats()
				vm.Pace(0)
			case orchestrator.PhaseVMMLive:
				liveEnd = time.Now()
			}
		},
	})
	res.setReport(rep)
	if err != nil {
		cancel()
		vm.Resume()
		<-done
		return res, err
	}
	if h := <-held; h.at.Before(liveEnd) {
		res.HeldEarlyMS = ms(liveEnd.Sub(h.at))
	} else if !liveEnd.IsZero() {
		res.RateAchieved = statsSince(h.stats, atLive).Rate()
	}
	if err := <-done; err != nil {
		return res, fmt.Errorf("workload after the migration: %w", err)
	}
	if res.RateAchieved == 0 {
		res.RateAchieved = vm.Workload().Stats().Rate()
	}
	got, err := vm.Digest()
	if err != nil {
		return res, err
	}
	res.DigestOK = got == want
	if !res.DigestOK {
		return res, fmt.Errorf("digest %s, reference %s", hex.EncodeToString(got[:8]), hex.EncodeToString(want[:8]))
	}
	if dv, err := p.Hosts[1].VGPU("bench"); err == nil {
		res.UsedBytes = nonzeroBytes(dv.Memory())
	}
	return res, nil
}

// heldPoint is when the workload reached the pause point, and its counters
// then.
type heldPoint struct {
	at    time.Time
	stats guest.WorkloadStats
}

// heldAt reports when vm's workload parks at its HoldAt point (ch, the
// hold's channel).
func heldAt(ctx context.Context, vm *sim.VM, ch <-chan struct{}) <-chan heldPoint {
	out := make(chan heldPoint, 1)
	go func() {
		select {
		case <-ch:
			out <- heldPoint{time.Now(), vm.Workload().Stats()}
		case <-ctx.Done():
			out <- heldPoint{}
		}
	}()
	return out
}

// statsSince is what a workload did between two readings of its counters.
func statsSince(now, then guest.WorkloadStats) guest.WorkloadStats {
	return guest.WorkloadStats{Steps: now.Steps - then.Steps, PagesWritten: now.PagesWritten - then.PagesWritten, Active: now.Active - then.Active}
}

func fpsOf(w guest.WorkloadConfig) float64 {
	if w.FPS > 0 {
		return w.FPS
	}
	return guest.DefaultFPS
}

// nonzeroBytes is the bytes of mem's pages that hold anything.
func nonzeroBytes(mem []byte) uint64 {
	var n uint64
	for off := 0; off+4096 <= len(mem); off += 4096 {
		for _, b := range mem[off : off+4096] {
			if b != 0 {
				n += 4096
				break
			}
		}
	}
	return n
}
