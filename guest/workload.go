package guest

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/gmig-dev/gmig/abi"
)

// WorkloadConfig shapes a Workload. Zero fields take the defaults below.
// ParseWorkload reads one from a spec such as "render,rate=200,fill=0.75"
// (workload_profile.go), the form the in-guest program takes.
type WorkloadConfig struct {
	// Profile is what the workload does: the seeded mix (ProfileMixed,
	// the default) or one of the shapes of workload_profile.go.
	Profile Profile
	// Rate is a profile's dirty rate: graphics pages written per second of
	// guest time, in MiB/s (256 pages each); 0 is the profile's default.
	// The mix ignores it.
	Rate float64
	// FPS is steps per second of guest time: each step waits out the rest
	// of its period after its fence (0: the profile's default, 60; the mix
	// runs unpaced; negative: unpaced).
	FPS float64
	// Unpaced runs the steps back to back whatever FPS says; FPS still
	// sizes a profile's steps (a reference run of a paced workload).
	Unpaced bool
	// Fill is the fraction of the vGPU's pages given seeded data before
	// the workload's first step (a guest's textures and weights), stored
	// by the CPU through the aperture, skipping every page the driver has
	// allocated; 0: none. Pages outside the region are not in the digest.
	Fill float64

	MemSize    uint64 // graphics memory the workload uses (default 2 MiB; profiles: workload_profile.go)
	OpsPerStep int    // at most this many operations per step (default 8)
	SaxpyN     int    // SAXPY array length in floats (default 3000)
	GridW      uint32 // STENCIL grid width (default 67)
	GridH      uint32 // STENCIL grid height (default 45)
	FBW        uint32 // RENDER framebuffer width (default 160)
	FBH        uint32 // RENDER framebuffer height (default 100)
	// Check keeps a reference model (ref.go) and verifies graphics memory
	// and every DMA read against it after each step.
	Check bool
	// CheckTouched, with Check, reads back after each step only the pages
	// the step changed in the model, through the device (DMA_FROM_GFX into
	// guest RAM) rather than the aperture, and the whole region when
	// Digest reads it: for a guest whose aperture reads are slow (under
	// TCG every aperture access goes through QEMU's device emulation).
	CheckTouched bool
}

func (c WorkloadConfig) withDefaults() WorkloadConfig {
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def32 := func(v *uint32, d uint32) {
		if *v == 0 {
			*v = d
		}
	}
	c = c.profileDefaults()
	if c.MemSize == 0 && c.Profile == ProfileMixed {
		c.MemSize = 2 << 20
	}
	c.MemSize = pageRoundUp(c.MemSize)
	def(&c.OpsPerStep, 8)
	def(&c.SaxpyN, 3000)
	def32(&c.GridW, 67)
	def32(&c.GridH, 45)
	def32(&c.FBW, 160)
	def32(&c.FBH, 100)
	return c
}

// Workload is a deterministic, seeded mix of device commands and guest CPU
// stores into the aperture; every step ends at a fence. Same seed, same
// config: the same operations and the same final graphics memory.
type Workload struct {
	cfg    WorkloadConfig
	seed   int64
	l      layout
	plan   stepPlanner
	gateFn func(ctx context.Context) error
	period time.Duration // FPS's step period; 0: unpaced

	base  uint64 // graphics address of the region (allocated on first step)
	fence uint64 // graphics address of the workload's WRITE_MEM fence slot
	model []byte // reference model of the region, with Check
	prev  []byte // the model at the step's start, with CheckTouched
	steps uint64
	ops   [numOpKinds]uint64

	submitted    bool // device commands submitted since the last wait
	pendingReads []pendingRead
	stageUsed    uint64

	gated time.Duration // this step's time blocked in the gate
	stats workloadCounters
}

// stepPlanner plans a workload's steps: the mix (workload_plan.go) or a
// profile (workload_profile.go). Its state is everything the next step
// depends on, so equal seeds give equal traces.
type stepPlanner interface {
	next() []Op
}

// workloadCounters are a Workload's running totals, read from any
// goroutine (Stats).
type workloadCounters struct {
	steps  atomic.Uint64 // steps completed after the first
	pages  atomic.Uint64 // pages written by those steps
	active atomic.Int64  // their guest time in ns: in Step, not blocked in the gate
}

// WorkloadStats is what a Workload has done after its first step (the
// first sets up the region and is not counted).
type WorkloadStats struct {
	Steps uint64 // steps completed
	// PagesWritten counts graphics pages written by those steps: every
	// page an operation stores into, once per operation (a page written
	// twice counts twice), the closing fence's slot not included.
	PagesWritten uint64
	// Active is their guest time: from each step's start to the end of
	// its period (or its fence, if later), less time blocked in the gate
	// (a simulator's pause or hold).
	Active time.Duration
}

// Rate is the achieved dirty rate: pages written per second of Active
// time, in MiB/s.
func (s WorkloadStats) Rate() float64 {
	if s.Active <= 0 {
		return 0
	}
	return float64(s.PagesWritten) * abi.PageSize / (1 << 20) / s.Active.Seconds()
}

// StepsPerSec is steps completed per second of Active time.
func (s WorkloadStats) StepsPerSec() float64 {
	if s.Active <= 0 {
		return 0
	}
	return float64(s.Steps) / s.Active.Seconds()
}

// Stats returns the counters; it may be called from any goroutine while
// the workload runs.
func (w *Workload) Stats() WorkloadStats {
	return WorkloadStats{
		Steps:        w.stats.steps.Load(),
		PagesWritten: w.stats.pages.Load(),
		Active:       time.Duration(w.stats.active.Load()),
	}
}

// pendingRead is a DMA_FROM_GFX whose result is checked after the fence.
// It holds where in the staging buffer the result lands, not the bytes:
// a Rebind in between (a migrated guest's new bus) maps guest RAM anew.
type pendingRead struct {
	op   Op
	off  uint64 // offset in the staging buffer
	want []byte
}

// NewWorkload returns a workload for seed and cfg.
func NewWorkload(seed int64, cfg WorkloadConfig) (*Workload, error) {
	cfg = cfg.withDefaults()
	l, err := cfg.layout()
	if err != nil {
		return nil, err
	}
	cfg.MemSize = l.size
	if uint64(cfg.OpsPerStep)*(16<<10) > DefaultStagingSize {
		return nil, fmt.Errorf("guest: %d operations per step may overrun the DMA staging buffer", cfg.OpsPerStep)
	}
	w := &Workload{cfg: cfg, seed: seed, l: l}
	rng := rand.New(rand.NewPCG(uint64(seed), 0x776f726b)) // "work"
	if cfg.Profile == ProfileMixed {
		w.plan = &planner{rng: rng, l: l, cfg: cfg, loaded: map[uint32][]uint32{}, nextHandle: 0x100}
	} else {
		w.plan = newProfilePlanner(rng, l, cfg)
	}
	if cfg.FPS > 0 && !cfg.Unpaced {
		w.period = time.Duration(float64(time.Second) / cfg.FPS)
	}
	if cfg.Check {
		w.model = make([]byte, cfg.MemSize)
		if cfg.CheckTouched {
			w.prev = make([]byte, cfg.MemSize)
		}
	}
	return w, nil
}

// Next plans the next step without running it: the trace of a workload is
// the sequence of Next results. Step calls it.
func (w *Workload) Next() []Op { return w.plan.next() }

// Steps is the number of steps run.
func (w *Workload) Steps() uint64 { return w.steps }

// OpCounts counts the operations run, by kind.
func (w *Workload) OpCounts() map[OpKind]uint64 {
	m := map[OpKind]uint64{}
	for k, n := range w.ops {
		if n > 0 {
			m[OpKind(k)] = n
		}
	}
	return m
}

// Region is the graphics range the workload uses (valid after a step).
func (w *Workload) Region() (ga, size uint64) { return w.base, w.cfg.MemSize }

// SetGate installs a function the workload calls before each operation and
// before each step's closing fence; it may block. A simulator uses it to
// stop the guest at an arbitrary point between operations, as a VM stop
// freezes a guest wherever it is, with commands still in flight on the
// device. The gate's error ends the step.
func (w *Workload) SetGate(g func(ctx context.Context) error) { w.gateFn = g }

func (w *Workload) gate(ctx context.Context) error {
	if w.gateFn == nil {
		return nil
	}
	t := time.Now()
	err := w.gateFn(ctx)
	w.gated += time.Since(t)
	return err
}

// Run runs steps steps.
func (w *Workload) Run(ctx context.Context, d *Driver, steps int) error {
	for range steps {
		if err := w.Step(ctx, d); err != nil {
			return err
		}
	}
	return nil
}

// Step plans and runs one step, ending at a fence and, when paced, at the
// end of its period; with Check it then verifies the DMA reads and
// graphics memory against the model.
func (w *Workload) Step(ctx context.Context, d *Driver) error {
	start := time.Now()
	w.gated = 0
	if w.fence == 0 {
		if err := w.place(d); err != nil {
			return err
		}
	}
	first := w.steps == 0
	ops := w.Next()
	if first && w.cfg.Fill > 0 {
		ops = append([]Op{{Kind: OpPrefill, Seed: uint64(w.seed)}}, ops...)
	}
	w.pendingReads, w.stageUsed, w.submitted = w.pendingReads[:0], 0, false
	if w.prev != nil {
		copy(w.prev, w.model)
	}
	var pages uint64
	for _, op := range ops {
		if err := w.gate(ctx); err != nil {
			return err
		}
		if err := w.exec(ctx, d, op); err != nil {
			return fmt.Errorf("guest: workload step %d: %s: %w", w.steps, op, err)
		}
		w.ops[op.Kind]++
		pages += w.pagesWritten(op)
	}
	if err := w.gate(ctx); err != nil {
		return err
	}
	v := d.FenceAt(abi.FenceWriteMem, w.fence)
	if err := d.Wait(ctx, v); err != nil {
		return fmt.Errorf("guest: workload step %d: %w", w.steps, err)
	}
	w.steps++
	if w.cfg.Check {
		if err := w.verify(ctx, d, v); err != nil {
			return err
		}
	}
	if first {
		return nil
	}
	if w.period > 0 {
		if err := sleepUntil(ctx, start.Add(w.gated+w.period)); err != nil {
			return err
		}
	}
	w.stats.pages.Add(pages)
	w.stats.active.Add(int64(time.Since(start) - w.gated))
	w.stats.steps.Add(1)
	return nil
}

// sleepUntil waits until t or ctx's end.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *Workload) place(d *Driver) error {
	base, err := d.Alloc(w.cfg.MemSize)
	if err != nil {
		return fmt.Errorf("guest: workload region: %w", err)
	}
	fence, err := d.Alloc(abi.PageSize)
	if err != nil {
		d.Free(base)
		return fmt.Errorf("guest: workload fence slot: %w", err)
	}
	w.base, w.fence = base, fence
	return nil
}

// Digest is the sha256 of the workload's graphics memory in graphics
// address order, read through the aperture.
func (w *Workload) Digest(d *Driver) ([32]byte, error) {
	if w.fence == 0 {
		return [32]byte{}, fmt.Errorf("guest: digest of a workload that has not run")
	}
	buf := make([]byte, w.cfg.MemSize)
	if err := d.ReadGA(w.base, buf); err != nil {
		return [32]byte{}, err
	}
	if w.model != nil {
		if i := firstDiff(buf, w.model); i >= 0 {
			return [32]byte{}, fmt.Errorf("guest: workload after %d steps: graphics address %#x (region offset %#x) is %#02x, model %#02x",
				w.steps, w.base+uint64(i), i, buf[i], w.model[i])
		}
	}
	return sha256.Sum256(buf), nil
}

// seededBytes fills b from seed.
func seededBytes(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := 0; i < len(b); i += 8 {
		var x [8]byte
		binary.LittleEndian.PutUint64(x[:], r.Uint64())
		copy(b[i:], x[:])
	}
}

// seededFloats fills b with finite binary32 values in [-1, 1) from seed.
func seededFloats(b []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for i := 0; i+4 <= len(b); i += 4 {
		binary.LittleEndian.PutUint32(b[i:], math.Float32bits(float32(r.Float64()*2-1)))
	}
}

func f32bits(f float32) uint32 { return math.Float32bits(f) }
