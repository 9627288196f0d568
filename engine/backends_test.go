package engine

// Checks every back end must pass, run by the back ends' own tests through
// export_test.go: the same bytes as the software back end, the engine's
// model test through the ring, guest modules across a save and restore.

import (
	"bytes"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/gtt"
)

// specialFloats are values whose arithmetic tests rounding, denormals,
// infinities, signed zeros and NaN payloads.
var specialFloats = []uint32{
	0x00000000, 0x80000000, 0x00000001, 0x807fffff, 0x00800000, 0x7f7fffff, 0xff7fffff,
	0x7f800000, 0xff800000, 0x7fc00000, 0xffc00001, 0x7f800001, 0x3f800001, 0x33800000,
}

// randSpecialFloats fills b with float32s, one in eight special.
func randSpecialFloats(rng *rand.Rand, b []byte) {
	for i := 0; i+4 <= len(b); i += 4 {
		v := math.Float32bits(float32(rng.NormFloat64() * math.Pow(2, float64(rng.IntN(80)-40))))
		if rng.IntN(8) == 0 {
			v = specialFloats[rng.IntN(len(specialFloats))]
		}
		le.PutUint32(b[i:], v)
	}
}

// runDifferential runs the same random operations, extents
// fragmented, unaligned, overlapping and aliased, on the software back end
// and on the back end newB makes over win (another back end over identical
// memory; seed varies the operations), and requires the same bytes: after
// every Read, and of the whole memory after every Sync.
func runDifferential(t *testing.T, newB func(t testing.TB, window []byte) Backend, win []byte, seed uint64) {
	runDifferentialLocal(t, func(t testing.TB, w []byte, _ uint64) Backend { return newB(t, w) }, win, 0, seed)
}

// runDifferentialLocal is runDifferential over win followed by local bytes
// of device-local memory (ABI 1.2), which newB's back end keeps where it
// likes (extents from len(win) on name it; it starts zeroed, as the
// software back end's): operations place their extents in both, and the
// local bytes are compared through Read.
func runDifferentialLocal(t *testing.T, newB func(t testing.TB, window []byte, local uint64) Backend, win []byte, local, seed uint64) {
	size := uint64(len(win))
	rng := rand.New(rand.NewPCG(42, seed))
	swMem := make([]byte, size+local)
	randSpecialFloats(rng, swMem[:size])
	copy(win, swMem)
	sw, nv := NewSoftware(swMem), newB(t, win, local)
	same := func(round int) {
		t.Helper()
		if i := firstDiffAt(swMem[:size], win); i >= 0 {
			t.Fatalf("round %d: memory differs at %#x: software %#x, %s %#x", round, i, swMem[i], nv.Name(), win[i])
		}
		if local == 0 {
			return
		}
		got := make([]byte, local)
		if err := nv.Read(got, []gtt.Extent{{Off: size, Len: local}}); err != nil {
			t.Fatal(err)
		}
		if i := firstDiffAt(swMem[size:], got); i >= 0 {
			t.Fatalf("round %d: local memory differs at %#x: software %#x, %s %#x", round, i, swMem[size+uint64(i)], nv.Name(), got[i])
		}
	}
	both := func(name string, f func(Backend) error) {
		t.Helper()
		e1, e2 := f(sw), f(nv)
		if (e1 == nil) != (e2 == nil) {
			t.Fatalf("%s: software %v, %s %v", name, e1, nv.Name(), e2)
		}
	}
	for round := range 300 {
		pl := newPlacer(rng, size+local)
		switch op := rng.IntN(9); op {
		case 0: // copy, disjoint or overlapping
			n := 1 + rng.Uint64N(50000)
			src := pl.place(n, 1)
			dst := pl.place(n, 1)
			if rng.IntN(3) == 0 { // overlap: dst shifted inside src's slots
				dst = sliceExtents(append(append([]gtt.Extent{}, src...), pl.place(64, 1)...), rng.Uint64N(64), n)
			}
			both("copy", func(b Backend) error { return b.Copy(dst, src) })
		case 1:
			n := 4 * (1 + rng.Uint64N(20000))
			dst := pl.place(n, 4)
			p := rng.Uint32()
			both("fill", func(b Backend) error { return b.Fill(dst, p) })
		case 2:
			n := 1 + rng.Uint64N(30000)
			dst := pl.place(n, 1)
			data := randBytes(rng, int(n))
			both("write", func(b Backend) error { return b.Write(dst, data) })
		case 3, 4:
			n := 1 + rng.Uint64N(20000)
			x, y := pl.place(4*n, 4), pl.place(4*n, 4)
			if rng.IntN(4) == 0 { // y shares host memory with x
				y = sliceExtents(append(append([]gtt.Extent{}, x...), pl.place(4*n, 4)...), 4*rng.Uint64N(n), 4*n)
			}
			a := math.Float32frombits(specialFloats[rng.IntN(len(specialFloats))])
			if rng.IntN(2) == 0 {
				a = float32(rng.NormFloat64())
			}
			both("saxpy", func(b Backend) error { return b.Saxpy(n, a, x, y) })
		case 5:
			w, h := uint32(1+rng.IntN(200)), uint32(1+rng.IntN(200))
			in, out := pl.place(uint64(4*w*h), 4), pl.place(uint64(4*w*h), 4)
			both("stencil", func(b Backend) error { return b.Stencil(w, h, in, out) })
		case 6:
			w, h := uint32(1+rng.IntN(300)), uint32(1+rng.IntN(300))
			fb := pl.place(uint64(4*w*h), 4)
			frame := rng.Uint64()
			both("render", func(b Backend) error { return b.Render(w, h, frame, fb) })
		case 7:
			n := 1 + rng.Uint64N(40000)
			src := pl.place(n, 1)
			g1, g2 := make([]byte, n), make([]byte, n)
			if err := sw.Read(g1, src); err != nil {
				t.Fatal(err)
			}
			if err := nv.Read(g2, src); err != nil {
				t.Fatal(err)
			}
			if i := firstDiffAt(g1, g2); i >= 0 {
				t.Fatalf("round %d: read differs at byte %d: software %#x, %s %#x", round, i, g1[i], nv.Name(), g2[i])
			}
		case 8:
			if err := nv.Sync(); err != nil {
				t.Fatal(err)
			}
			same(round)
		}
	}
	if err := nv.Sync(); err != nil {
		t.Fatal(err)
	}
	same(300)
}

func firstDiffAt(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return len(a)
}

// runEngineModel runs the engine's random-program model test on the
// back end opt makes: every command through the ring, checked against
// the plain-Go model after each batch (quiescing first, which writes back
// what is pending).
func runEngineModel(t *testing.T, opt harnessOpt) {
	for seed := uint64(1); seed <= 3; seed++ {
		h := newHarness(t, seed, 8192, opt)
		m := newModel(h)
		p := &program{rng: rand.New(rand.NewPCG(seed, 99))}
		h.submit(p.loads()...)
		for range 8 {
			cmds := p.batch(60)
			h.submit(cmds...)
			m.run(cmds...)
			h.e.Quiesce()
			m.check(t, h)
			h.e.Resume()
		}
		if f := h.ev.takeFaults(); len(f) != 0 {
			t.Fatalf("seed %d: faults %v", seed, f)
		}
	}
}

// scalePTX is a guest module: u32 at base+off+4i *= mul for i < threads.
const scalePTX = `.version 7.0
.target sm_80
.address_size 64

.visible .entry scale(
	.param .u64 base,
	.param .u64 threads,
	.param .u64 off,
	.param .u64 mul
)
{
	.reg .pred %p<2>;
	.reg .b32 %r<8>;
	.reg .b64 %rd<12>;

	ld.param.u64 %rd1, [base];
	ld.param.u64 %rd2, [threads];
	ld.param.u64 %rd3, [off];
	ld.param.u64 %rd4, [mul];
	mov.u32 %r1, %ctaid.x;
	mov.u32 %r2, %ntid.x;
	mov.u32 %r3, %tid.x;
	mul.wide.u32 %rd5, %r1, %r2;
	cvt.u64.u32 %rd6, %r3;
	add.u64 %rd7, %rd5, %rd6;
	setp.ge.u64 %p1, %rd7, %rd2;
	@%p1 bra DONE;
	shl.b64 %rd8, %rd7, 2;
	add.u64 %rd9, %rd1, %rd3;
	add.u64 %rd10, %rd9, %rd8;
	ld.global.u32 %r4, [%rd10];
	cvt.u32.u64 %r5, %rd4;
	mul.lo.u32 %r6, %r4, %r5;
	st.global.u32 [%rd10], %r6;
DONE:
	ret;
}
`

// runGuestModule loads a guest PTX module through the ring, runs it
// on graphics memory the guest CPU wrote, checks its result and that the
// page it changed is reported as written, then saves the engine and
// restores it onto a second vGPU (another partition, another device
// mirror): the module is loaded again under the same guest handle and
// runs there.
func runGuestModule(t *testing.T, opt harnessOpt) {
	h := newHarness(t, 51, 4096, opt)
	img := append(append([]byte("scale"), 0), scalePTX...)
	h.write(tDataGA, img)
	const ga = tDataGA + 8*abi.PageSize // one data page, 1024 words
	vals := make([]byte, abi.PageSize)
	for i := range 1024 {
		le.PutUint32(vals[4*i:], uint32(i+1))
	}
	h.write(ga, vals)
	off := h.gtt.pages[ga>>abi.PageShift].host << abi.PageShift // aperture offset of the page
	h.submit(KernelLoadModule{Handle: 9, Args: 3, Image: tDataGA, Len: uint32(len(img))},
		Launch{Handle: 9, Args: []uint64{1024, off, 3}},
		Fence{Value: 1})
	if f := h.ev.takeFaults(); len(f) != 0 {
		t.Fatalf("faults %v (%v)", f, f[0].Err)
	}
	got := h.read(ga, abi.PageSize)
	for i := range 1024 {
		if v := le.Uint32(got[4*i:]); v != 3*uint32(i+1) {
			t.Fatalf("word %d = %d, want %d", i, v, 3*(i+1))
		}
	}
	h.ev.mu.Lock()
	var wrote bool
	for _, xs := range h.ev.wrote {
		for _, x := range xs {
			wrote = wrote || (x.Off <= off && off < x.Off+x.Len)
		}
	}
	h.ev.mu.Unlock()
	if !wrote {
		t.Fatal("the module's page was not reported written")
	}
	h.e.Quiesce()
	st, err := h.e.Save()
	h.e.Resume()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Modules) != 1 || st.Modules[0].Entry != "scale" || st.DeviceVA == 0 {
		t.Fatalf("saved modules %+v at %#x", st.Modules, st.DeviceVA)
	}

	h2 := newHarness(t, 52, 4096, opt)
	h2.e.Quiesce()
	st.Enabled, st.Head, st.Tail = false, 0, 0 // keep h2's own ring
	if err := h2.e.Restore(st); err != nil {
		t.Fatal(err)
	}
	if err := h2.e.SetEnabled(true); err != nil {
		t.Fatal(err)
	}
	h2.tail = 0
	h2.e.Resume()
	h2.write(ga, vals)
	off2 := h2.gtt.pages[ga>>abi.PageShift].host << abi.PageShift
	h2.submit(Launch{Handle: 9, Args: []uint64{1024, off2, 5}}, Fence{Value: 2})
	if f := h2.ev.takeFaults(); len(f) != 0 {
		t.Fatalf("restored: faults %v (%v)", f, f[0].Err)
	}
	if v := le.Uint32(h2.read(ga+40, 4)); v != 5*11 {
		t.Fatalf("restored module: word 10 = %d, want 55", v)
	}
	// A back end that runs guest modules has a device address space.
	type mirrored interface {
		MirrorBase() uint64
		Close() error
	}
	b1 := h.e.cfg.Backend.(mirrored)
	b2 := h2.e.cfg.Backend.(mirrored)
	t.Logf("source mirror at %#x, destination at %#x (the source's range is in use in this process)", b1.MirrorBase(), b2.MirrorBase())

	// Once the source's mirror is gone its address is free: a restore asks
	// for it and gets it (the same physical memory, remapped, no copy).
	va := b1.MirrorBase()
	h.e.Close()
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}
	h2.e.Quiesce()
	got2, err := h2.e.cfg.Backend.Place(va)
	h2.e.Resume()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after the source closed: destination mirror asked for %#x, now at %#x", va, got2)
	h2.write(ga, vals)
	h2.submit(Launch{Handle: 9, Args: []uint64{1024, off2, 7}}, Fence{Value: 3})
	if v := le.Uint32(h2.read(ga+40, 4)); v != 7*11 {
		t.Fatalf("after Place: word 10 = %d, want 77", v)
	}
	if got2 != va {
		t.Errorf("mirror not re-created at the source's device address %#x (at %#x)", va, got2)
	}
}
