package guest

import (
	"fmt"
	"math/rand/v2"

	"github.com/gmig-dev/gmig/abi"
)

// OpKind is one kind of workload operation.
type OpKind uint8

// Workload operations.
const (
	OpFill       OpKind = iota // device FILL in the byte zone
	OpCopy                     // device COPY into the byte zone (from anywhere)
	OpDMATo                    // DMA_TO_GFX of seeded bytes into the byte zone
	OpDMAFrom                  // DMA_FROM_GFX of any range, checked against the model
	OpSaxpy                    // SAXPY over the x and y arrays
	OpStencil                  // STENCIL iterations between the two grids
	OpRender                   // RENDER of the next frame into the framebuffer
	OpLoad                     // KERNEL_LOAD
	OpUnload                   // KERNEL_UNLOAD
	OpCPUWrite                 // CPU stores of seeded bytes straight into the aperture
	OpCPUFloats                // CPU stores of seeded finite floats over a float array
	OpInit                     // device FILL of the whole region with zeros
	OpCPUScatter               // CPU stores of Len seeded bytes into each of Word pages of [Dst, Dst+Src), picked by Seed
	OpPrefill                  // CPU stores of seeded pages over a fraction WorkloadConfig.Fill of the aperture (prefill.go)
	numOpKinds
)

var opNames = [numOpKinds]string{"fill", "copy", "dma-to", "dma-from", "saxpy", "stencil", "render",
	"load", "unload", "cpu-write", "cpu-floats", "init", "cpu-scatter", "prefill"}

func (k OpKind) String() string {
	if k < numOpKinds {
		return opNames[k]
	}
	return fmt.Sprintf("op(%d)", uint8(k))
}

// Op is one planned workload operation. Addresses are offsets into the
// workload's region; Seed generates the bytes of DMA and CPU writes.
type Op struct {
	Kind   OpKind
	Dst    uint64
	Src    uint64
	Len    uint64
	Word   uint32 // FILL pattern, SAXPY a (float bits), kernel kind, STENCIL iterations
	Handle uint32
	Frame  uint64
	Seed   uint64
}

func (o Op) String() string {
	return fmt.Sprintf("%s dst=%#x src=%#x len=%#x word=%#x handle=%#x frame=%d seed=%#x",
		o.Kind, o.Dst, o.Src, o.Len, o.Word, o.Handle, o.Frame, o.Seed)
}

// layout places the zones of the workload region, page aligned.
type layout struct {
	size           uint64
	bytesLen       uint64 // byte zone [0, bytesLen)
	x, y           uint64 // SAXPY arrays
	gridA, gridB   uint64 // STENCIL grids
	fb             uint64 // framebuffer
	saxpyN         uint64
	gridW, gridH   uint32
	fbW, fbH       uint32
	gridLen, fbLen uint64
	kv, kvLen      uint64 // inference profile: the appended state's ring
}

func newLayout(cfg WorkloadConfig) (layout, error) {
	l := layout{size: cfg.MemSize, saxpyN: uint64(cfg.SaxpyN), gridW: cfg.GridW, gridH: cfg.GridH, fbW: cfg.FBW, fbH: cfg.FBH}
	l.gridLen = 4 * uint64(l.gridW) * uint64(l.gridH)
	l.fbLen = 4 * uint64(l.fbW) * uint64(l.fbH)
	zones := []uint64{4 * l.saxpyN, 4 * l.saxpyN, l.gridLen, l.gridLen, l.fbLen}
	var tail uint64
	for _, z := range zones {
		tail += pageRoundUp(z)
	}
	if tail+64<<10 > l.size {
		return l, fmt.Errorf("guest: workload region of %#x bytes cannot hold %#x bytes of arrays and a 64 KiB byte zone", l.size, tail)
	}
	l.bytesLen = l.size - tail
	at := l.bytesLen
	place := func(n uint64) uint64 {
		off := at
		at += pageRoundUp(n)
		return off
	}
	l.x, l.y = place(4*l.saxpyN), place(4*l.saxpyN)
	l.gridA, l.gridB = place(l.gridLen), place(l.gridLen)
	l.fb = place(l.fbLen)
	return l, nil
}

// planner generates the op sequence; its state is everything the next
// step's plan depends on, so equal seeds give equal traces.
type planner struct {
	rng        *rand.Rand
	l          layout
	cfg        WorkloadConfig
	step       uint64
	loaded     map[uint32][]uint32 // kernel kind -> loaded handles, in load order
	nloaded    int
	nextHandle uint32
	frame      uint64
	parity     bool // stencil: false = A->B next
}

// opWeights is the relative frequency of each randomly chosen op kind.
var opWeights = [...]struct {
	kind OpKind
	w    int
}{
	{OpFill, 14}, {OpCopy, 14}, {OpDMATo, 10}, {OpDMAFrom, 8}, {OpSaxpy, 10}, {OpStencil, 10},
	{OpRender, 8}, {OpLoad, 3}, {OpUnload, 3}, {OpCPUWrite, 14}, {OpCPUFloats, 3},
}

const maxWorkloadKernels = 12

func (p *planner) next() []Op {
	defer func() { p.step++ }()
	if p.step == 0 {
		l := p.l
		return []Op{
			{Kind: OpInit, Len: l.size},
			{Kind: OpCPUFloats, Dst: l.x, Len: 4 * l.saxpyN, Seed: p.rng.Uint64()},
			{Kind: OpCPUFloats, Dst: l.y, Len: 4 * l.saxpyN, Seed: p.rng.Uint64()},
			{Kind: OpCPUFloats, Dst: l.gridA, Len: l.gridLen, Seed: p.rng.Uint64()},
		}
	}
	n := 1 + p.rng.IntN(p.cfg.OpsPerStep)
	var ops []Op
	for range n {
		ops = p.appendOp(ops, p.pickKind())
	}
	return ops
}

func (p *planner) pickKind() OpKind {
	total := 0
	for _, w := range opWeights {
		total += w.w
	}
	r := p.rng.IntN(total)
	for _, w := range opWeights {
		if r < w.w {
			return w.kind
		}
		r -= w.w
	}
	panic("unreachable")
}

// span picks [off, off+n) inside [lo, hi) with n in [1, maxLen], both
// multiples of align.
func (p *planner) span(lo, hi, maxLen, align uint64) (off, n uint64) {
	n = align * (1 + p.rng.Uint64N(min(maxLen, hi-lo)/align))
	off = lo + align*p.rng.Uint64N((hi-lo-n)/align+1)
	return off, n
}

func (p *planner) appendOp(ops []Op, k OpKind) []Op {
	l := p.l
	switch k {
	case OpFill:
		dst, n := p.span(0, l.bytesLen, 64<<10, 4)
		return append(ops, Op{Kind: k, Dst: dst, Len: n, Word: p.rng.Uint32()})
	case OpCopy:
		src, n := p.span(0, l.size, 32<<10, 1)
		n = min(n, l.bytesLen)
		dst, _ := p.span(0, l.bytesLen-n+1, 1, 1)
		return append(ops, Op{Kind: k, Dst: dst, Src: src, Len: n})
	case OpDMATo:
		dst, n := p.span(0, l.bytesLen, 16<<10, 1)
		return append(ops, Op{Kind: k, Dst: dst, Len: n, Seed: p.rng.Uint64()})
	case OpDMAFrom:
		src, n := p.span(0, l.size, 16<<10, 1)
		return append(ops, Op{Kind: k, Src: src, Len: n})
	case OpCPUWrite:
		lo, hi := uint64(0), l.bytesLen
		if p.rng.IntN(4) == 0 {
			lo, hi = l.fb, l.fb+l.fbLen
		}
		dst, n := p.span(lo, hi, 8<<10, 1)
		return append(ops, Op{Kind: k, Dst: dst, Len: n, Seed: p.rng.Uint64()})
	case OpCPUFloats:
		return append(ops, Op{Kind: k, Dst: l.y, Len: 4 * l.saxpyN, Seed: p.rng.Uint64()})
	case OpSaxpy:
		ops, h := p.handle(ops, abi.KernelSaxpy)
		a := float32(p.rng.Float64()*2 - 1)
		return append(ops, Op{Kind: k, Handle: h, Len: 1 + p.rng.Uint64N(l.saxpyN), Word: f32bits(a), Src: l.x, Dst: l.y})
	case OpStencil:
		ops, h := p.handle(ops, abi.KernelStencil)
		iters := 1 + p.rng.Uint32N(3)
		src, dst := l.gridA, l.gridB
		if p.parity {
			src, dst = dst, src
		}
		if iters%2 == 1 {
			p.parity = !p.parity
		}
		return append(ops, Op{Kind: k, Handle: h, Src: src, Dst: dst, Word: iters})
	case OpRender:
		ops, h := p.handle(ops, abi.KernelRender)
		p.frame++
		return append(ops, Op{Kind: k, Handle: h, Dst: l.fb, Frame: p.frame})
	case OpLoad:
		if p.nloaded >= maxWorkloadKernels {
			return p.appendOp(ops, OpUnload)
		}
		return p.load(ops, []uint32{abi.KernelSaxpy, abi.KernelStencil, abi.KernelRender}[p.rng.IntN(3)])
	case OpUnload:
		if p.nloaded == 0 {
			return ops
		}
		kind := []uint32{abi.KernelSaxpy, abi.KernelStencil, abi.KernelRender}[p.rng.IntN(3)]
		hs := p.loaded[kind]
		if len(hs) == 0 {
			return ops
		}
		i := p.rng.IntN(len(hs))
		h := hs[i]
		p.loaded[kind] = append(hs[:i:i], hs[i+1:]...)
		p.nloaded--
		return append(ops, Op{Kind: OpUnload, Handle: h, Word: kind})
	}
	panic(fmt.Sprintf("guest: planning %s", k))
}

// handle returns a loaded handle of kind, planning a load if none is.
func (p *planner) handle(ops []Op, kind uint32) ([]Op, uint32) {
	if hs := p.loaded[kind]; len(hs) > 0 {
		return ops, hs[p.rng.IntN(len(hs))]
	}
	ops = p.load(ops, kind)
	return ops, ops[len(ops)-1].Handle
}

func (p *planner) load(ops []Op, kind uint32) []Op {
	h := p.nextHandle
	p.nextHandle++
	p.loaded[kind] = append(p.loaded[kind], h)
	p.nloaded++
	return append(ops, Op{Kind: OpLoad, Handle: h, Word: kind})
}
