package guest

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/internal/bytesize"
)

// Profile is the shape of a Workload: the seeded mix of every operation,
// or one of the shapes a benchmark compares migrations on. Each profile
// writes a controlled number of pages per step (WorkloadConfig.Rate at
// WorkloadConfig.FPS steps per second of guest time) and is as
// deterministic as the mix: same seed, same config, same trace and digest.
type Profile uint8

// Profiles.
const (
	// ProfileMixed is the seeded mix of every operation (workload_plan.go).
	ProfileMixed Profile = iota
	// ProfileIdle writes nothing but each step's fence.
	ProfileIdle
	// ProfileRender is a render loop: a RENDER kernel rewrites a
	// framebuffer 1024 pixels (one page) wide every frame.
	ProfileRender
	// ProfileStencil is a compute stencil: one Jacobi step per frame
	// between two grids 1024 floats (one page) wide.
	ProfileStencil
	// ProfileChurn is memory churn: device FILLs of 16-page runs at seeded
	// places over the whole region.
	ProfileChurn
	// ProfileInference is read-mostly: large read-only weights (written
	// once, by the CPU, at the start), a SAXPY per frame that reads a
	// window of them into small activations, and state appended by DMA
	// into a ring (a KV cache).
	ProfileInference
	// ProfileCPU is guest-CPU writers: 256-byte stores through the
	// aperture into seeded pages of the region, which no device sees
	// (only hashing can find them).
	ProfileCPU
	numProfiles
)

var profileNames = [numProfiles]string{"mixed", "idle", "render", "stencil", "churn", "inference", "cpu"}

func (p Profile) String() string {
	if p < numProfiles {
		return profileNames[p]
	}
	return fmt.Sprintf("profile(%d)", uint8(p))
}

// Profiles lists every profile, the mix first.
func Profiles() []Profile {
	out := make([]Profile, numProfiles)
	for i := range out {
		out[i] = Profile(i)
	}
	return out
}

// ParseProfile returns the profile named s.
func ParseProfile(s string) (Profile, error) {
	for i, n := range profileNames {
		if s == n {
			return Profile(i), nil
		}
	}
	return 0, fmt.Errorf("guest: unknown workload profile %q (want one of %s)", s, strings.Join(profileNames[:], ", "))
}

// Profile defaults.
const (
	// DefaultFPS is a profile's steps per second when FPS is 0: a 60 Hz
	// frame rate.
	DefaultFPS = 60
	// profileRowPixels is the width of a render framebuffer (RGBA8) and of
	// a stencil grid (float32): one page per row, so a row count is a
	// page count.
	profileRowPixels = abi.PageSize / 4
	// churnRun is the most pages one churn FILL writes.
	churnRun = 16
	// scatterBytes is what a CPU writer stores into each page it picks.
	scatterBytes = 256
	// inferenceActPages bounds the activations the inference SAXPY writes
	// each step; the rest of its rate is appended state.
	inferenceActPages = 16
	// inferenceKVBytes is the appended state's ring.
	inferenceKVBytes = 16 << 20
	// initChunk bounds one CPU store operation of a profile's set-up.
	initChunk = 4 << 20
)

// profileDefaultRate is each profile's default dirty rate in MiB/s.
var profileDefaultRate = [numProfiles]float64{ProfileRender: 200, ProfileStencil: 100, ProfileChurn: 100,
	ProfileInference: 20, ProfileCPU: 50}

// profileDefaultMem is each profile's default region (0: what its frame
// needs).
var profileDefaultMem = [numProfiles]uint64{ProfileIdle: 64 << 10, ProfileChurn: 64 << 20, ProfileCPU: 64 << 20,
	ProfileInference: 128 << 20}

// profileDefaults fills in a profile's defaults.
func (c WorkloadConfig) profileDefaults() WorkloadConfig {
	if c.Profile == ProfileMixed || c.Profile >= numProfiles {
		return c
	}
	if c.FPS == 0 {
		c.FPS = DefaultFPS
	}
	if c.Rate == 0 {
		c.Rate = profileDefaultRate[c.Profile]
	}
	if c.MemSize == 0 {
		c.MemSize = profileDefaultMem[c.Profile]
	}
	return c
}

// StepPages is the pages a profile writes per step: Rate at FPS (at
// DefaultFPS when unpaced), at least one except for idle.
func (c WorkloadConfig) StepPages() uint64 {
	c = c.profileDefaults()
	if c.Profile == ProfileMixed || c.Profile == ProfileIdle {
		return 0
	}
	fps := c.FPS
	if fps <= 0 {
		fps = DefaultFPS
	}
	return max(1, uint64(math.Round(c.Rate*(1<<20)/abi.PageSize/fps)))
}

// ParseWorkload reads a workload spec: a profile name, then optional
// comma-separated settings — rate=MiB/s, fps=N (0: unpaced), mem=SIZE
// (the region: 64M, 1G, 4096), fill=FRACTION — as in
// "render,rate=200,fill=0.75". The empty spec is the default mix.
func ParseWorkload(spec string) (WorkloadConfig, error) {
	var c WorkloadConfig
	if spec == "" {
		return c, nil
	}
	parts := strings.Split(spec, ",")
	var err error
	if c.Profile, err = ParseProfile(strings.TrimSpace(parts[0])); err != nil {
		return c, err
	}
	for _, kv := range parts[1:] {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return c, fmt.Errorf("guest: workload setting %q: want KEY=VALUE", kv)
		}
		var f float64
		switch k {
		case "rate", "fps", "fill":
			if f, err = strconv.ParseFloat(v, 64); err != nil || f < 0 || math.IsInf(f, 0) {
				return c, fmt.Errorf("guest: workload setting %s=%q: want a number ≥ 0", k, v)
			}
		}
		switch k {
		case "rate":
			c.Rate = f
		case "fps":
			c.FPS = f
			if f == 0 {
				c.FPS = -1
			}
		case "fill":
			if f > 1 {
				return c, fmt.Errorf("guest: workload fill %v: want a fraction in [0, 1]", f)
			}
			c.Fill = f
		case "mem":
			if c.MemSize, err = bytesize.Parse(v); err != nil {
				return c, err
			}
		default:
			return c, fmt.Errorf("guest: unknown workload setting %q (want rate, fps, mem, fill)", k)
		}
	}
	return c, nil
}

// Spec is the config's profile and settings in ParseWorkload's form (only
// the settings that ParseWorkload reads and that are set).
func (c WorkloadConfig) Spec() string {
	parts := []string{c.Profile.String()}
	if c.Rate != 0 {
		parts = append(parts, "rate="+strconv.FormatFloat(c.Rate, 'g', -1, 64))
	}
	switch {
	case c.FPS < 0:
		parts = append(parts, "fps=0")
	case c.FPS > 0:
		parts = append(parts, "fps="+strconv.FormatFloat(c.FPS, 'g', -1, 64))
	}
	if c.MemSize != 0 {
		parts = append(parts, "mem="+formatSize(c.MemSize))
	}
	if c.Fill != 0 {
		parts = append(parts, "fill="+strconv.FormatFloat(c.Fill, 'g', -1, 64))
	}
	return strings.Join(parts, ",")
}

// formatSize writes n as parseSize reads it, in the largest exact unit.
func formatSize(n uint64) string {
	for _, u := range []struct {
		shift uint
		s     string
	}{{30, "G"}, {20, "M"}, {10, "K"}} {
		if n != 0 && n%(1<<u.shift) == 0 {
			return strconv.FormatUint(n>>u.shift, 10) + u.s
		}
	}
	return strconv.FormatUint(n, 10)
}

// layout places a config's zones: the mix's (newLayout) or a profile's.
func (c WorkloadConfig) layout() (layout, error) {
	if c.Profile == ProfileMixed {
		return newLayout(c)
	}
	if c.Profile >= numProfiles {
		return layout{}, fmt.Errorf("guest: unknown workload profile %d", c.Profile)
	}
	pages := c.StepPages()
	l := layout{size: c.MemSize, bytesLen: c.MemSize}
	need := uint64(abi.PageSize)
	switch c.Profile {
	case ProfileRender:
		l.fbW, l.fbH = profileRowPixels, uint32(pages)
		l.fbLen = pages * abi.PageSize
		need = l.fbLen
	case ProfileStencil:
		l.gridW, l.gridH = profileRowPixels, uint32(max(pages, 3))
		l.gridLen = uint64(l.gridH) * abi.PageSize
		l.gridB = l.gridLen
		need = 2 * l.gridLen
	case ProfileChurn, ProfileCPU:
		need = churnRun * abi.PageSize
	case ProfileInference:
		act := min(pages, inferenceActPages)
		l.saxpyN = act * profileRowPixels
		l.y = 0
		l.kv, l.kvLen = act*abi.PageSize, inferenceKVBytes
		l.x = l.kv + l.kvLen
		need = l.x + act*abi.PageSize
	}
	if l.size == 0 {
		l.size, l.bytesLen = need, need
	}
	if need > l.size {
		return l, fmt.Errorf("guest: %s workload needs a region of %#x bytes, has %#x", c.Profile, need, l.size)
	}
	return l, nil
}

// profilePlanner plans a profile's steps.
type profilePlanner struct {
	rng    *rand.Rand
	l      layout
	cfg    WorkloadConfig
	pages  uint64 // per step
	step   uint64
	frame  uint64
	parity bool   // stencil: false = A->B next
	cursor uint64 // inference: the next append's offset in the KV ring
}

// Kernel handles a profile loads in its first step.
const (
	profileRenderHandle  = 0x10
	profileStencilHandle = 0x11
	profileSaxpyHandle   = 0x12
)

func newProfilePlanner(rng *rand.Rand, l layout, cfg WorkloadConfig) *profilePlanner {
	return &profilePlanner{rng: rng, l: l, cfg: cfg, pages: cfg.StepPages()}
}

func (p *profilePlanner) next() []Op {
	defer func() { p.step++ }()
	if p.step == 0 {
		return p.setUp()
	}
	l := p.l
	switch p.cfg.Profile {
	case ProfileRender:
		p.frame++
		return []Op{{Kind: OpRender, Handle: profileRenderHandle, Dst: l.fb, Frame: p.frame}}
	case ProfileStencil:
		src, dst := l.gridA, l.gridB
		if p.parity {
			src, dst = dst, src
		}
		p.parity = !p.parity
		return []Op{{Kind: OpStencil, Handle: profileStencilHandle, Src: src, Dst: dst, Word: 1}}
	case ProfileChurn:
		var ops []Op
		slots := l.size/abi.PageSize - churnRun + 1
		for left := p.pages; left > 0; {
			n := min(left, churnRun)
			off := p.rng.Uint64N(slots) * abi.PageSize
			ops = append(ops, Op{Kind: OpFill, Dst: off, Len: n * abi.PageSize, Word: p.rng.Uint32()})
			left -= n
		}
		return ops
	case ProfileCPU:
		return []Op{{Kind: OpCPUScatter, Dst: 0, Len: l.size, Word: uint32(p.pages), Seed: p.rng.Uint64()}}
	case ProfileInference:
		return p.infer()
	}
	return nil
}

// setUp is the first step: the region zeroed, the kernels loaded, the
// starting data stored.
func (p *profilePlanner) setUp() []Op {
	l := p.l
	ops := []Op{{Kind: OpInit, Len: l.size}}
	floats := func(off, n uint64) {
		for at := off; at < off+n; at += initChunk {
			ops = append(ops, Op{Kind: OpCPUFloats, Dst: at, Len: min(initChunk, off+n-at), Seed: p.rng.Uint64()})
		}
	}
	switch p.cfg.Profile {
	case ProfileRender:
		ops = append(ops, Op{Kind: OpLoad, Handle: profileRenderHandle, Word: abi.KernelRender})
	case ProfileStencil:
		ops = append(ops, Op{Kind: OpLoad, Handle: profileStencilHandle, Word: abi.KernelStencil})
		floats(l.gridA, l.gridLen)
	case ProfileInference:
		ops = append(ops, Op{Kind: OpLoad, Handle: profileSaxpyHandle, Word: abi.KernelSaxpy})
		floats(l.y, 4*l.saxpyN)
		floats(l.x, l.size-l.x)
	}
	return ops
}

// infer is an inference step: activations from a window of the weights,
// then the step's state appended to the KV ring.
func (p *profilePlanner) infer() []Op {
	l := p.l
	act := 4 * l.saxpyN
	windows := (l.size - l.x) / act
	x := l.x + (p.step%windows)*act
	a := float32(p.rng.Float64()*2 - 1)
	ops := []Op{{Kind: OpSaxpy, Handle: profileSaxpyHandle, Len: l.saxpyN, Word: f32bits(a), Src: x, Dst: l.y}}
	// The append goes through the DMA staging buffer: at most its size a
	// step (a higher rate is capped there; WorkloadStats shows it).
	appendPages := min(p.pages-act/abi.PageSize, DefaultStagingSize/abi.PageSize)
	if appendPages == 0 {
		return ops
	}
	n := appendPages * abi.PageSize
	if p.cursor+n > l.kvLen {
		p.cursor = 0
	}
	ops = append(ops, Op{Kind: OpDMATo, Dst: l.kv + p.cursor, Len: n, Seed: p.rng.Uint64()})
	p.cursor += n
	return ops
}

// scatter runs a CPU scatter op: Word stores of scatterBytes seeded bytes
// at 8-byte aligned places in seeded pages of [Dst, Dst+Len), each through
// store(region offset, bytes).
func scatter(op Op, store func(off uint64, b []byte) error) error {
	rng := rand.New(rand.NewPCG(op.Seed, 0x73636174)) // "scat"
	pages := op.Len / abi.PageSize
	var buf [scatterBytes]byte
	for range op.Word {
		page := rng.Uint64N(pages)
		at := 8 * rng.Uint64N((abi.PageSize-scatterBytes)/8+1)
		for i := 0; i < len(buf); i += 8 {
			binary.LittleEndian.PutUint64(buf[i:], rng.Uint64())
		}
		if err := store(op.Dst+page*abi.PageSize+at, buf[:]); err != nil {
			return err
		}
	}
	return nil
}

// pagesWritten is the graphics pages op stores into (WorkloadStats).
func (w *Workload) pagesWritten(op Op) uint64 {
	span := func(off, n uint64) uint64 {
		if n == 0 {
			return 0
		}
		return (off+n-1)/abi.PageSize - off/abi.PageSize + 1
	}
	switch op.Kind {
	case OpFill, OpCopy, OpDMATo, OpCPUWrite, OpCPUFloats, OpInit:
		return span(op.Dst, op.Len)
	case OpSaxpy:
		return span(op.Dst, 4*op.Len)
	case OpStencil:
		return uint64(op.Word) * span(op.Dst, w.l.gridLen)
	case OpRender:
		return span(op.Dst, w.l.fbLen)
	case OpCPUScatter:
		return uint64(op.Word)
	}
	return 0
}
