package engine

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gmig-dev/gmig/abi"
)

// model is the reference: graphics memory as one flat array in graphics
// address order, guest RAM, and plain Go for every command. It handles
// valid commands only.
type model struct {
	gfx   []byte
	ram   []byte
	fence uint64
}

func newModel(h *harness) *model {
	return &model{gfx: h.read(0, tGAPages*abi.PageSize), ram: bytes.Clone(h.ram.mem)}
}

func (m *model) run(cmds ...Command) {
	for _, c := range cmds {
		switch c := c.(type) {
		case Copy:
			copy(m.gfx[c.Dst:c.Dst+c.Len], m.gfx[c.Src:c.Src+c.Len])
		case Fill:
			for i := uint64(0); i < c.Len; i += 4 {
				le.PutUint32(m.gfx[c.Dst+i:], c.Pattern)
			}
		case DMA:
			if c.ToGfx {
				copy(m.gfx[c.GA:c.GA+c.Len], m.ram[c.GPA:])
			} else {
				copy(m.ram[c.GPA:c.GPA+c.Len], m.gfx[c.GA:])
			}
		case Fence:
			m.fence = c.Value
			if c.WriteMem {
				le.PutUint64(m.gfx[c.Addr:], c.Value)
			}
		case Launch:
			m.launch(c)
		}
	}
}

// launch knows the kind from the handle: the tests use handle == kind.
func (m *model) launch(c Launch) {
	a := c.Args
	switch c.Handle {
	case abi.KernelSaxpy:
		n := int(a[0])
		refSaxpy(n, math.Float32frombits(uint32(a[1])), m.gfx[a[2]:], m.gfx[a[3]:])
	case abi.KernelStencil:
		w, h := int(a[0]), int(a[1])
		refStencil(w, h, m.gfx[a[2]:a[2]+uint64(4*w*h)], m.gfx[a[3]:a[3]+uint64(4*w*h)])
	case abi.KernelRender:
		w, h := int(a[0]), int(a[1])
		refRender(w, h, a[3], m.gfx[a[2]:a[2]+uint64(4*w*h)])
	}
}

// check compares the harness's data pages and RAM with the model.
func (m *model) check(t *testing.T, h *harness) {
	t.Helper()
	if got, want := h.gfx(), m.gfx[tDataGA:tROPage*abi.PageSize]; !bytes.Equal(got, want) {
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("graphics memory differs first at GA %#x: %#x, want %#x", tDataGA+i, got[i], want[i])
			}
		}
	}
	if !bytes.Equal(h.ram.mem, m.ram) {
		t.Fatal("guest RAM differs")
	}
	if r := h.e.Regs(); r.FenceDone != m.fence {
		t.Fatalf("FENCE_DONE %d, want %d", r.FenceDone, m.fence)
	}
}

// program generates valid commands over the data pages. Kernel handles
// equal their kinds.
type program struct {
	rng   *rand.Rand
	fence uint64
}

const tDataEnd = tROPage * abi.PageSize

// span picks a 4-aligned range of n bytes in the data pages.
func (p *program) span(n uint64) uint64 {
	return tDataGA + 4*p.rng.Uint64N((tDataEnd-tDataGA-n)/4+1)
}

// disjoint picks two non-overlapping ranges of n bytes.
func (p *program) disjoint(n uint64) (uint64, uint64) {
	for {
		a, b := p.span(n), p.span(n)
		if !gaOverlap(a, n, b, n) {
			return a, b
		}
	}
}

func (p *program) loads() []Command {
	return []Command{
		KernelLoad{Handle: abi.KernelSaxpy, Kind: abi.KernelSaxpy},
		KernelLoad{Handle: abi.KernelStencil, Kind: abi.KernelStencil},
		KernelLoad{Handle: abi.KernelRender, Kind: abi.KernelRender},
	}
}

// next returns one random valid command (kernels must be loaded).
func (p *program) next() Command {
	r := p.rng
	switch r.IntN(9) {
	case 0:
		return Nop{Bytes: 8 * (1 + r.Uint32N(4))}
	case 1:
		n := 1 + r.Uint64N(40000)
		// Unaligned and often overlapping.
		src := tDataGA + r.Uint64N(tDataEnd-tDataGA-n)
		dst := tDataGA + r.Uint64N(tDataEnd-tDataGA-n)
		if r.IntN(2) == 0 {
			dst = min(src+r.Uint64N(64), tDataEnd-n)
		}
		return Copy{Dst: dst, Src: src, Len: n}
	case 2:
		n := 4 * (1 + r.Uint64N(10000))
		return Fill{Dst: p.span(n), Len: n, Pattern: r.Uint32()}
	case 3:
		n := 1 + r.Uint64N(30000)
		return DMA{ToGfx: r.IntN(2) == 0, GA: tDataGA + r.Uint64N(tDataEnd-tDataGA-n), GPA: r.Uint64N(tRAMSize - n), Len: n}
	case 4:
		p.fence++
		return Fence{Value: p.fence, Addr: p.span(8) &^ 7, WriteMem: r.IntN(2) == 0, Interrupt: r.IntN(2) == 0}
	case 5, 6:
		n := 1 + r.Uint64N(20000)
		x, y := p.disjoint(4 * n)
		return Launch{Handle: abi.KernelSaxpy, Args: []uint64{n, uint64(math.Float32bits(float32(r.NormFloat64()))), x, y}}
	case 7:
		w, h := 1+r.Uint64N(150), 1+r.Uint64N(150)
		in, out := p.disjoint(4 * w * h)
		return Launch{Handle: abi.KernelStencil, Args: []uint64{w, h, in, out}}
	default:
		w, h := 1+r.Uint64N(150), 1+r.Uint64N(150)
		return Launch{Handle: abi.KernelRender, Args: []uint64{w, h, p.span(4 * w * h), r.Uint64()}}
	}
}

func (p *program) batch(n int) []Command {
	cmds := make([]Command, n)
	for i := range cmds {
		cmds[i] = p.next()
	}
	return cmds
}
