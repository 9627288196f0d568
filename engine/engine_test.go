package engine

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/gtt"
)

func TestEngineAllCommands(t *testing.T) {
	t.Parallel()
	for seed := uint64(1); seed <= 3; seed++ {
		h := newHarness(t, seed, 8192)
		m := newModel(h)
		p := &program{rng: rand.New(rand.NewPCG(seed, 99))}
		h.submit(p.loads()...)
		for range 8 {
			cmds := p.batch(60)
			h.submit(cmds...)
			m.run(cmds...)
			m.check(t, h)
		}
		if f := h.ev.takeFaults(); len(f) != 0 {
			t.Fatalf("seed %d: faults %v", seed, f)
		}
		if r := h.e.Regs(); r.CmdsDone != 3+8*60 || r.Busy {
			t.Fatalf("seed %d: regs %+v", seed, r)
		}
	}
}

// TestEngineRingWrap runs commands that straddle the end of the ring.
func TestEngineRingWrap(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 4, 4096)
	m := newModel(h)
	p := &program{rng: rand.New(rand.NewPCG(4, 4))}
	h.submit(p.loads()...)
	// Pad to 4096-8 so that the next command's header is the ring's last 8
	// bytes and its payload wraps.
	for h.tail+256 <= 4096-8 {
		h.push(Nop{Bytes: 256})
	}
	h.push(Nop{Bytes: 4096 - 8 - h.tail})
	if h.tail != 4088 {
		t.Fatalf("tail %d", h.tail)
	}
	h.doorbell() // the padding, as its own batch: the ring holds less than 4096
	h.wait()
	x, y := p.disjoint(4 * 100)
	cmds := []Command{
		Launch{Handle: abi.KernelSaxpy, Args: []uint64{100, 0x3fc00000, x, y}},
		Copy{Dst: tDataGA, Src: tDataGA + 8000, Len: 5000},
	}
	h.submit(cmds...)
	m.run(cmds...)
	if f := h.ev.takeFaults(); len(f) != 0 {
		t.Fatalf("faults %v", f)
	}
	m.check(t, h)
	if r := h.e.Regs(); r.Head != 72 || r.Tail != 72 {
		t.Fatalf("after wrap regs %+v", r)
	}
	// Many more wraps at every alignment.
	for range 30 {
		cmds := p.batch(40)
		h.submit(cmds...)
		m.run(cmds...)
	}
	m.check(t, h)
	if f := h.ev.takeFaults(); len(f) != 0 {
		t.Fatalf("faults %v", f)
	}
}

func TestEngineFramingError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		bad  []byte
		op   uint16
	}{
		{"unknown opcode", header(99, 0, 8), 99},
		{"size mismatch", header(abi.OpCopy, 0, 24), abi.OpCopy},
		{"size zero", header(abi.OpNop, 0, 0), abi.OpNop},
		{"size too large", header(abi.OpNop, 0, 264), abi.OpNop},
		{"reserved flags", header(abi.OpFill, 1, 32), abi.OpFill},
		{"fence reserved flag", header(abi.OpFence, 4, 24), abi.OpFence},
		{"launch 9 args", launchRaw(9, 88), abi.OpLaunch},
		{"launch size mismatch", launchRaw(2, 24), abi.OpLaunch},
	}
	for i, tt := range tests {
		h := newHarness(t, uint64(10+i), 8192)
		m := newModel(h)
		good := Fill{Dst: tDataGA, Len: 64, Pattern: 1}
		dropped := Fill{Dst: tDataGA + 4096, Len: 64, Pattern: 2}
		h.push(good)
		badOff := h.tail
		h.pushBytes(tt.bad)
		h.push(dropped)
		h.doorbell()
		h.wait()
		m.run(good)
		m.check(t, h)
		checkFaults(t, tt.name, h.ev.takeFaults(), Fault{Code: abi.ErrCommand, RingOffset: badOff, Opcode: tt.op})
		if r := h.e.Regs(); r.Head != h.tail || r.CmdsDone != 2 {
			t.Fatalf("%s: regs %+v, want head %d and 2 commands", tt.name, r, h.tail)
		}
		// The next batch runs.
		later := Fill{Dst: tDataGA + 8192, Len: 64, Pattern: 3}
		h.submit(later)
		m.run(later)
		m.check(t, h)
	}
}

// TestEngineTruncatedBatch: a command larger than the data up to the tail.
func TestEngineTruncatedBatch(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 20, 8192)
	m := newModel(h)
	h.push(Nop{Bytes: 8})
	h.pushBytes(encode(Copy{Dst: tDataGA, Src: tDataGA + 64, Len: 64})[:16])
	h.doorbell()
	h.wait()
	checkFaults(t, "truncated", h.ev.takeFaults(), Fault{Code: abi.ErrCommand, RingOffset: 8, Opcode: abi.OpCopy})
	later := Fill{Dst: tDataGA, Len: 8, Pattern: 5}
	h.submit(later)
	m.run(later)
	m.check(t, h)
}

// checkFaults compares faults ignoring Err, which must be set.
func checkFaults(t *testing.T, name string, got []Fault, want ...Fault) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: faults %+v, want %+v", name, got, want)
	}
	for i := range got {
		if got[i].Err == nil {
			t.Errorf("%s: fault %d has no Err", name, i)
		}
		g := got[i]
		g.Err = nil
		if g != want[i] {
			t.Errorf("%s: fault %+v (%v), want %+v", name, g, got[i].Err, want[i])
		}
	}
}

func TestEngineFetchPageFault(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 21, 4096)
	if err := h.e.SetEnabled(false); err != nil {
		t.Fatal(err)
	}
	h.e.SetRingBase(tUnmapped)
	if err := h.e.SetEnabled(true); err != nil {
		t.Fatal(err)
	}
	if err := h.e.Doorbell(16); err != nil {
		t.Fatal(err)
	}
	h.wait()
	checkFaults(t, "header fetch", h.ev.takeFaults(), Fault{Code: abi.ErrPageFault})
	if r := h.e.Regs(); r.Head != 16 || r.CmdsDone != 1 {
		t.Fatalf("regs %+v", r)
	}

	// A command whose payload sits on an unmapped page: the ring's first
	// page is the read-only page (readable), its second is unmapped.
	if err := h.e.SetEnabled(false); err != nil {
		t.Fatal(err)
	}
	h.e.SetRingBase(tROPage * abi.PageSize)
	h.e.SetRingSize(8192)
	if err := h.e.SetEnabled(true); err != nil {
		t.Fatal(err)
	}
	var ring []byte
	for len(ring)+256 <= 4088 {
		ring = append(ring, encode(Nop{Bytes: 256})...)
	}
	ring = append(ring, encode(Nop{Bytes: uint32(4088 - len(ring))})...)
	nops := uint64(len(ring)/256 + 1)
	ring = append(ring, encode(Copy{})[:8]...) // header on page 0, payload on page 1
	h.write(tROPage*abi.PageSize, ring)
	if err := h.e.Doorbell(4088 + 32); err != nil {
		t.Fatal(err)
	}
	h.wait()
	checkFaults(t, "payload fetch", h.ev.takeFaults(), Fault{Code: abi.ErrPageFault, RingOffset: 4088, Opcode: abi.OpCopy})
	if r := h.e.Regs(); r.Head != 4120 || r.CmdsDone != 1+nops+1 {
		t.Fatalf("regs %+v", r)
	}
}

func TestEngineExecFaults(t *testing.T) {
	t.Parallel()
	const ro = tROPage * abi.PageSize
	tests := []struct {
		name string
		cmd  Command
		code uint32
	}{
		{"copy from unmapped", Copy{Dst: tDataGA, Src: tUnmapped, Len: 16}, abi.ErrPageFault},
		{"copy to read-only", Copy{Dst: ro, Src: tDataGA, Len: 16}, abi.ErrPageFault},
		{"copy into unmapped tail", Copy{Dst: tGAPages*abi.PageSize - 8, Src: tDataGA, Len: 16}, abi.ErrPageFault},
		{"copy overflow", Copy{Dst: tDataGA, Src: ^uint64(0) - 4, Len: 16}, abi.ErrCommand},
		{"fill misaligned", Fill{Dst: tDataGA + 2, Len: 8}, abi.ErrCommand},
		{"fill odd length", Fill{Dst: tDataGA, Len: 6}, abi.ErrCommand},
		{"fill read-only", Fill{Dst: ro, Len: 8}, abi.ErrPageFault},
		{"fill overflow", Fill{Dst: ^uint64(0) - 3, Len: 8}, abi.ErrCommand},
		{"dma to gfx bad gpa", DMA{ToGfx: true, GA: tDataGA, GPA: tRAMSize - 4, Len: 16}, abi.ErrDMA},
		{"dma from gfx bad gpa", DMA{GA: tDataGA, GPA: tRAMSize, Len: 16}, abi.ErrDMA},
		{"dma to read-only", DMA{ToGfx: true, GA: ro, GPA: 0, Len: 16}, abi.ErrPageFault},
		{"dma from unmapped", DMA{GA: tUnmapped, GPA: 0, Len: 16}, abi.ErrPageFault},
		{"dma gpa overflow", DMA{GA: tDataGA, GPA: ^uint64(0), Len: 16}, abi.ErrCommand},
		{"fence misaligned", Fence{Value: 1, Addr: tDataGA + 4, WriteMem: true}, abi.ErrCommand},
		{"fence read-only", Fence{Value: 1, Addr: ro, WriteMem: true}, abi.ErrPageFault},
		{"load handle 0", KernelLoad{Handle: 0, Kind: abi.KernelSaxpy}, abi.ErrKernel},
		{"load unknown kind", KernelLoad{Handle: 5, Kind: 9}, abi.ErrKernel},
		{"load in use", KernelLoad{Handle: 1, Kind: abi.KernelRender}, abi.ErrKernel},
		{"unload unknown", KernelUnload{Handle: 77}, abi.ErrKernel},
		{"launch unknown", Launch{Handle: 77, Args: []uint64{1, 0, tDataGA, tDataGA + 64}}, abi.ErrKernel},
		{"launch arity", Launch{Handle: 1, Args: []uint64{1, 0, tDataGA}}, abi.ErrKernel},
		{"saxpy overlap", Launch{Handle: 1, Args: []uint64{16, 0, tDataGA, tDataGA + 60}}, abi.ErrKernel},
		{"saxpy misaligned", Launch{Handle: 1, Args: []uint64{16, 0, tDataGA + 2, tDataGA + 4096}}, abi.ErrKernel},
		{"saxpy too big", Launch{Handle: 1, Args: []uint64{1<<28 + 1, 0, tDataGA, 1 << 40}}, abi.ErrKernel},
		{"saxpy overflow", Launch{Handle: 1, Args: []uint64{16, 0, tDataGA, ^uint64(0) - 7}}, abi.ErrKernel},
		{"saxpy unmapped", Launch{Handle: 1, Args: []uint64{16, 0, tUnmapped, tDataGA}}, abi.ErrPageFault},
		{"saxpy y read-only", Launch{Handle: 1, Args: []uint64{16, 0, tDataGA, ro}}, abi.ErrPageFault},
		{"stencil overlap", Launch{Handle: 2, Args: []uint64{4, 4, tDataGA, tDataGA + 32}}, abi.ErrKernel},
		{"stencil zero width", Launch{Handle: 2, Args: []uint64{0, 4, tDataGA, tDataGA + 4096}}, abi.ErrKernel},
		{"stencil huge", Launch{Handle: 2, Args: []uint64{1 << 32, 1, tDataGA, tDataGA + 4096}}, abi.ErrKernel},
		{"render too big", Launch{Handle: 3, Args: []uint64{1 << 16, 1 << 13, tDataGA, 0}}, abi.ErrKernel},
		{"render misaligned", Launch{Handle: 3, Args: []uint64{4, 4, tDataGA + 1, 0}}, abi.ErrKernel},
	}
	h := newHarness(t, 22, 8192)
	m := newModel(h)
	h.submit(
		KernelLoad{Handle: 1, Kind: abi.KernelSaxpy},
		KernelLoad{Handle: 2, Kind: abi.KernelStencil},
		KernelLoad{Handle: 3, Kind: abi.KernelRender},
	)
	for i, tt := range tests {
		before := h.e.Regs().CmdsDone
		after := Fill{Dst: tDataGA + 8192, Len: 16, Pattern: uint32(i)}
		offs := h.submit(tt.cmd, after)
		m.run(after)
		m.check(t, h)
		checkFaults(t, tt.name, h.ev.takeFaults(), Fault{Code: tt.code, RingOffset: offs[0], Opcode: tt.cmd.Opcode()})
		if got := h.e.Regs().CmdsDone - before; got != 2 {
			t.Fatalf("%s: %d commands retired, want 2", tt.name, got)
		}
	}
}

func TestEngineMaxKernels(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 23, 8192)
	var cmds []Command
	for i := range uint32(abi.MaxKernels) {
		cmds = append(cmds, KernelLoad{Handle: 100 + i, Kind: 1 + i%3})
	}
	h.submit(cmds...)
	offs := h.submit(KernelLoad{Handle: 1, Kind: abi.KernelSaxpy})
	checkFaults(t, "65th", h.ev.takeFaults(), Fault{Code: abi.ErrKernel, RingOffset: offs[0], Opcode: abi.OpKernelLoad})
	h.submit(KernelUnload{Handle: 100}, KernelLoad{Handle: 1, Kind: abi.KernelSaxpy})
	if f := h.ev.takeFaults(); len(f) != 0 {
		t.Fatalf("faults %+v", f)
	}
	h.e.Quiesce()
	s, err := h.e.Save()
	if err != nil {
		t.Fatal(err)
	}
	h.e.Resume()
	// Kernel events: every successful load and unload, none for the refused 65th.
	h.ev.mu.Lock()
	kev := append([]kernelEvent(nil), h.ev.kernels...)
	h.ev.mu.Unlock()
	if len(kev) != abi.MaxKernels+2 || kev[0] != (kernelEvent{100, 1, true}) ||
		kev[len(kev)-2] != (kernelEvent{100, 0, false}) || kev[len(kev)-1] != (kernelEvent{1, abi.KernelSaxpy, true}) {
		t.Fatalf("kernel events: %d, ends %+v", len(kev), kev[max(0, len(kev)-2):])
	}
	if len(s.Kernels) != abi.MaxKernels || s.Kernels[0] != (KernelObject{Handle: 1, Kind: abi.KernelSaxpy}) {
		t.Fatalf("saved kernels %+v", s.Kernels)
	}
}

func TestEngineFence(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 24, 8192)
	addr := uint64(tDataGA + 0x128)
	h.submit(
		Fence{Value: 7, Addr: addr, Interrupt: true, WriteMem: true},
		Fence{Value: 9, Addr: addr + 8},
		Fence{Value: 11, Addr: tUnmapped, WriteMem: true}, // faults, does not complete
	)
	if got := le.Uint64(h.read(addr, 8)); got != 7 {
		t.Fatalf("fence memory %d, want 7", got)
	}
	if got := le.Uint64(h.read(addr+8, 8)); got == 9 {
		t.Fatal("fence without WRITE_MEM wrote memory")
	}
	want := []fenceEvent{{7, true}, {9, false}}
	if !reflect.DeepEqual(h.ev.fences, want) {
		t.Fatalf("fences %+v, want %+v", h.ev.fences, want)
	}
	if r := h.e.Regs(); r.FenceDone != 9 || r.CmdsDone != 3 {
		t.Fatalf("regs %+v", r)
	}
	checkFaults(t, "fence", h.ev.takeFaults(), Fault{Code: abi.ErrPageFault, RingOffset: 48, Opcode: abi.OpFence})
}

// TestEngineWrote checks that each command reports exactly the host extents
// it wrote.
func TestEngineWrote(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 25, 8192)
	h.submit(
		KernelLoad{Handle: 1, Kind: abi.KernelSaxpy},
		KernelLoad{Handle: 2, Kind: abi.KernelStencil},
		KernelLoad{Handle: 3, Kind: abi.KernelRender},
	)
	resolve := func(ga, n uint64) [][]gtt.Extent {
		xs, err := h.gtt.Resolve(ga, n, true)
		if err != nil {
			t.Fatal(err)
		}
		return [][]gtt.Extent{xs}
	}
	const d = tDataGA
	tests := []struct {
		cmd  Command
		want [][]gtt.Extent
	}{
		{Nop{Bytes: 16}, nil},
		{Copy{Dst: d + 100, Src: d + 50000, Len: 20000}, resolve(d+100, 20000)},
		{Fill{Dst: d + 4, Len: 9000, Pattern: 1}, resolve(d+4, 9000)},
		{DMA{ToGfx: true, GA: d + 7, GPA: 3, Len: 12345}, resolve(d+7, 12345)},
		{DMA{GA: d + 7, GPA: 3, Len: 12345}, nil},
		{Fence{Value: 1, Addr: d + 4088, WriteMem: true}, resolve(d+4088, 8)},
		{Fence{Value: 2}, nil},
		{KernelLoad{Handle: 9, Kind: 1}, nil},
		{KernelUnload{Handle: 9}, nil},
		{Launch{Handle: 1, Args: []uint64{3000, 0, d, d + 40000}}, resolve(d+40000, 12000)},
		{Launch{Handle: 2, Args: []uint64{30, 40, d, d + 40000}}, resolve(d+40000, 4800)},
		{Launch{Handle: 3, Args: []uint64{30, 40, d + 8, 5}}, resolve(d+8, 4800)},
		{Copy{Dst: tUnmapped, Src: d, Len: 8}, nil},
		{Copy{Dst: d, Src: d, Len: 0}, nil},
	}
	for _, tt := range tests {
		h.ev.mu.Lock()
		h.ev.wrote = nil
		h.ev.mu.Unlock()
		h.submit(tt.cmd)
		h.ev.takeFaults()
		if !reflect.DeepEqual(h.ev.wrote, tt.want) {
			t.Errorf("%#v: wrote %v, want %v", tt.cmd, h.ev.wrote, tt.want)
		}
	}
}

func TestEngineQuiesceMidBatch(t *testing.T) {
	t.Parallel()
	var h *harness
	var fills int
	var wait func()
	fired := make(chan struct{})
	h = newHarness(t, 26, 8192, withHook(func(op string) {
		if op != "fill" {
			return
		}
		if fills++; fills == 3 {
			wait = h.e.control(true) // quiesce asked while command 3 runs
			close(fired)
		}
	}))
	m := newModel(h)
	var cmds []Command
	for i := range 10 {
		cmds = append(cmds, Fill{Dst: tDataGA + uint64(i)*4096, Len: 4096, Pattern: uint32(i)})
	}
	offs := h.push(cmds...)
	h.doorbell()
	<-fired
	wait()
	r := h.e.Regs()
	if r.CmdsDone != 3 || r.Head != offs[3] || r.Tail != h.tail || !r.Busy {
		t.Fatalf("quiesced regs %+v, want 3 commands and head %d", r, offs[3])
	}
	// Doorbells are recorded, not run.
	more := []Command{Copy{Dst: tDataGA + 20*4096, Src: tDataGA, Len: 9000}}
	h.push(more...)
	h.doorbell()
	if r := h.e.Regs(); r.Tail != h.tail || r.CmdsDone != 3 {
		t.Fatalf("after doorbell while quiesced: %+v", r)
	}
	h.e.Resume()
	h.wait()
	m.run(append(cmds, more...)...)
	m.check(t, h)
	if r := h.e.Regs(); r.CmdsDone != 11 {
		t.Fatalf("regs %+v", r)
	}
}

func TestEngineDisableMidBatch(t *testing.T) {
	t.Parallel()
	var h *harness
	var fills int
	h = newHarness(t, 27, 8192, withHook(func(op string) {
		if fills++; fills == 2 {
			if err := h.e.SetEnabled(false); err != nil {
				panic(err)
			}
		}
	}))
	var cmds []Command
	for i := range 5 {
		cmds = append(cmds, Fill{Dst: tDataGA, Len: 64, Pattern: uint32(i)})
	}
	offs := h.push(cmds...)
	h.doorbell()
	h.wait()
	if r := h.e.Regs(); r.Enabled || r.CmdsDone != 2 || r.Head != offs[2] || r.Tail != h.tail {
		t.Fatalf("regs %+v, want disabled after 2 commands", r)
	}
	if err := h.e.Doorbell(0); !errors.Is(err, ErrBadDoorbell) {
		t.Fatalf("doorbell while disabled: %v", err)
	}
	if err := h.e.SetEnabled(true); err != nil {
		t.Fatal(err)
	}
	if r := h.e.Regs(); r.Head != 0 || r.Tail != 0 {
		t.Fatalf("enable did not zero head and tail: %+v", r)
	}
}

// TestEngineResetKeepsQuiesce: a Quiesce (a migration's stop phase) that
// races with a guest's reset holds. (Reset parked the engine itself and
// unparked it at the end if it had found it running, undoing a Quiesce
// that came in between: the engine ran the guest's commands after the
// migration had stopped it.)
func TestEngineResetKeepsQuiesce(t *testing.T) {
	t.Parallel()
	var h *harness
	var quiesced func()
	reset := make(chan struct{})
	fired := make(chan struct{})
	var once sync.Once
	h = newHarness(t, 28, 8192, withHook(func(op string) {
		once.Do(func() {
			// While the command runs: the reset first, then the Quiesce.
			go func() { h.e.Reset(); close(reset) }()
			for len(h.e.ctl) == 0 {
				runtime.Gosched()
			}
			quiesced = h.e.control(true)
			close(fired)
		})
	}))
	h.push(Fill{Dst: tDataGA, Len: 4096, Pattern: 1})
	h.doorbell()
	<-fired
	quiesced()
	<-reset
	if r := h.e.Regs(); r.Enabled || r.CmdsDone != 0 {
		t.Fatalf("after the reset: %+v", r)
	}
	h.e.SetRingBase(tRingGA)
	h.e.SetRingSize(8192)
	if err := h.e.SetEnabled(true); err != nil {
		t.Fatal(err)
	}
	h.tail = 0
	h.push(Fill{Dst: tDataGA, Len: 4096, Pattern: 2})
	h.doorbell()
	time.Sleep(20 * time.Millisecond)
	if r := h.e.Regs(); r.CmdsDone != 0 || r.Head != 0 {
		t.Fatalf("a quiesced engine ran a command after a reset: %+v", r)
	}
	h.e.Resume()
	h.wait()
	if r := h.e.Regs(); r.CmdsDone != 1 {
		t.Fatalf("after Resume: %+v", r)
	}
}
