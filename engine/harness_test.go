package engine

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/gtt"
)

// Graphics address layout of the test vGPU.
const (
	tRingGA    = 0                  // ring pages start here
	tDataGA    = 16 * abi.PageSize  // data pages: writable
	tROPage    = 256                // one read-only page
	tGAPages   = 257                // pages 0..256 mapped; 257.. unmapped
	tUnmapped  = 300 * abi.PageSize // an unmapped graphics address
	tPoolPages = 1024
	tRAMSize   = 1 << 20
)

// fakeGTT maps graphics pages to host pool pages.
type fakeGTT struct {
	mu    sync.Mutex
	pages map[uint64]fakePTE
}

type fakePTE struct {
	host     uint64 // host page number
	writable bool
}

func (g *fakeGTT) Resolve(ga, n uint64, write bool) ([]gtt.Extent, error) {
	return g.AppendResolve(nil, ga, n, write)
}

// AppendResolve is Resolve appending to dst, as gtt.Table's.
func (g *fakeGTT) AppendResolve(dst []gtt.Extent, ga, n uint64, write bool) ([]gtt.Extent, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ga+n < ga {
		return dst, errors.New("fakeGTT: range overflows")
	}
	xs, start := dst, len(dst)
	for off := ga; off < ga+n; {
		page, in := off>>abi.PageShift, off&(abi.PageSize-1)
		l := min(abi.PageSize-in, ga+n-off)
		pte, ok := g.pages[page]
		if !ok {
			return dst, fmt.Errorf("fakeGTT: page %#x unmapped", page)
		}
		if write && !pte.writable {
			return dst, fmt.Errorf("fakeGTT: page %#x read-only", page)
		}
		ho := pte.host<<abi.PageShift + in
		if k := len(xs); k > start && xs[k-1].Off+xs[k-1].Len == ho {
			xs[k-1].Len += l
		} else {
			xs = append(xs, gtt.Extent{Off: ho, Len: l})
		}
		off += l
	}
	return xs, nil
}

// fakeRAM is guest RAM; addresses at or above its size fault.
type fakeRAM struct{ mem []byte }

func (r *fakeRAM) ReadAt(p []byte, gpa uint64) error {
	if gpa+uint64(len(p)) > uint64(len(r.mem)) || gpa+uint64(len(p)) < gpa {
		return fmt.Errorf("fakeRAM: %#x+%#x unmapped", gpa, len(p))
	}
	copy(p, r.mem[gpa:])
	return nil
}

func (r *fakeRAM) WriteAt(p []byte, gpa uint64) error {
	if gpa+uint64(len(p)) > uint64(len(r.mem)) || gpa+uint64(len(p)) < gpa {
		return fmt.Errorf("fakeRAM: %#x+%#x unmapped", gpa, len(p))
	}
	copy(r.mem[gpa:], p)
	return nil
}

// recorder keeps every event.
type recorder struct {
	mu      sync.Mutex
	fences  []fenceEvent
	faults  []Fault
	wrote   [][]gtt.Extent
	kernels []kernelEvent
}

// kernelEvent is a KernelLoaded (loaded) or KernelUnloaded call.
type kernelEvent struct {
	handle, kind uint32
	loaded       bool
}

func (r *recorder) KernelLoaded(h, k uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.kernels = append(r.kernels, kernelEvent{h, k, true})
}

func (r *recorder) KernelUnloaded(h uint32) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.kernels = append(r.kernels, kernelEvent{h, 0, false})
}

type fenceEvent struct {
	value     uint64
	interrupt bool
}

func (r *recorder) FenceCompleted(v uint64, irq bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.fences = append(r.fences, fenceEvent{v, irq})
}

func (r *recorder) Faulted(f Fault) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.faults = append(r.faults, f)
}

func (r *recorder) Wrote(xs []gtt.Extent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wrote = append(r.wrote, xs)
}

func (r *recorder) takeFaults() []Fault {
	r.mu.Lock()
	defer r.mu.Unlock()
	f := r.faults
	r.faults = nil
	return f
}

// hookBackend calls hook before each operation of the back end it wraps.
type hookBackend struct {
	Backend
	hook func(op string)
}

func (b hookBackend) Copy(dst, src []gtt.Extent) error {
	b.hook("copy")
	return b.Backend.Copy(dst, src)
}

func (b hookBackend) Fill(dst []gtt.Extent, p uint32) error {
	b.hook("fill")
	return b.Backend.Fill(dst, p)
}

// harness is one vGPU: a host pool with a scrambled page mapping, guest
// RAM, an engine with its ring, and the events it reported.
type harness struct {
	t        testing.TB
	pool     []byte
	gtt      *fakeGTT
	ram      *fakeRAM
	ev       *recorder
	e        *Engine
	ringSize uint32
	tail     uint32 // where the next pushed command goes
}

type harnessOpt func(*harness, *Config)

// withHook wraps the software back end with a hook.
func withHook(hook func(op string)) harnessOpt {
	return func(h *harness, c *Config) { c.Backend = hookBackend{c.Backend, hook} }
}

// newHarness builds a vGPU whose graphics pages sit on a seeded permutation
// of the host pool's pages, in a partition that starts at a seeded offset.
func newHarness(t testing.TB, seed uint64, ringSize uint32, opts ...harnessOpt) *harness {
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b9))
	h := &harness{
		t:        t,
		pool:     make([]byte, tPoolPages*abi.PageSize),
		gtt:      &fakeGTT{pages: make(map[uint64]fakePTE)},
		ram:      &fakeRAM{mem: make([]byte, tRAMSize)},
		ev:       &recorder{},
		ringSize: ringSize,
	}
	part := rng.Uint64N(tPoolPages - tGAPages)
	perm := rng.Perm(tGAPages)
	for ga := range uint64(tGAPages) {
		h.gtt.pages[ga] = fakePTE{host: part + uint64(perm[ga]), writable: ga != tROPage}
	}
	for _, b := range [][]byte{h.pool, h.ram.mem} {
		for i := 0; i < len(b); i += 8 {
			le.PutUint64(b[i:], rng.Uint64())
		}
	}
	cfg := Config{Backend: NewSoftware(h.pool), GTT: h.gtt, RAM: h.ram, Events: h.ev}
	for _, o := range opts {
		o(h, &cfg)
	}
	h.e = New(cfg)
	h.e.SetRingBase(tRingGA)
	h.e.SetRingSize(ringSize)
	if err := h.e.SetEnabled(true); err != nil {
		t.Fatal(err)
	}
	h.e.Start()
	t.Cleanup(h.e.Close)
	return h
}

// write stores b at graphics address ga through the mapping, as the guest
// CPU does through the aperture.
func (h *harness) write(ga uint64, b []byte) {
	for len(b) > 0 {
		pte, ok := h.gtt.pages[ga>>abi.PageShift]
		if !ok {
			h.t.Fatalf("harness write to unmapped %#x", ga)
		}
		in := ga & (abi.PageSize - 1)
		n := copy(h.pool[pte.host<<abi.PageShift+in:(pte.host+1)<<abi.PageShift], b)
		b, ga = b[n:], ga+uint64(n)
	}
}

// read returns n bytes at graphics address ga.
func (h *harness) read(ga, n uint64) []byte {
	out := make([]byte, 0, n)
	for uint64(len(out)) < n {
		pte := h.gtt.pages[ga>>abi.PageShift]
		in := ga & (abi.PageSize - 1)
		l := min(abi.PageSize-in, n-uint64(len(out)))
		out = append(out, h.pool[pte.host<<abi.PageShift+in:][:l]...)
		ga += l
	}
	return out
}

// push writes commands into the ring at the harness tail (wrapping) without
// ringing the doorbell; it returns the ring offset of each.
func (h *harness) push(cmds ...Command) []uint32 {
	var offs []uint32
	for _, c := range cmds {
		offs = append(offs, h.tail)
		h.pushBytes(encode(c))
	}
	return offs
}

func (h *harness) pushBytes(b []byte) {
	for len(b) > 0 {
		n := min(uint32(len(b)), h.ringSize-h.tail)
		h.write(tRingGA+uint64(h.tail), b[:n])
		b, h.tail = b[n:], (h.tail+n)%h.ringSize
	}
}

func (h *harness) doorbell() {
	if err := h.e.Doorbell(h.tail); err != nil {
		h.t.Fatal(err)
	}
}

func (h *harness) wait() {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := h.e.WaitIdle(ctx); err != nil {
		h.t.Fatal(err)
	}
}

// submit pushes commands, rings and waits for the engine to go idle.
func (h *harness) submit(cmds ...Command) []uint32 {
	offs := h.push(cmds...)
	h.doorbell()
	h.wait()
	return offs
}

// gfx returns the data pages as the guest sees them (graphics address order).
func (h *harness) gfx() []byte { return h.read(tDataGA, tROPage*abi.PageSize-tDataGA) }
