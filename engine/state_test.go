package engine

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/gmig-dev/gmig/abi"
)

// TestEngineSaveRestore migrates an engine mid-batch: quiesce and save on
// one vGPU, move graphics memory and state to a vGPU with a different host
// mapping, resume there; the result equals an unmigrated run.
func TestEngineSaveRestore(t *testing.T) {
	t.Parallel()
	var src *harness
	var fills int
	var wait func()
	fired := make(chan struct{})
	src = newHarness(t, 31, 8192, withHook(func(op string) {
		if op == "fill" {
			if fills++; fills == 1 {
				wait = src.e.control(true)
				close(fired)
			}
		}
	}))
	m := newModel(src)
	p := &program{rng: rand.New(rand.NewPCG(31, 1))}
	cmds := p.loads()
	cmds = append(cmds, p.batch(20)...)
	cmds = append(cmds, Fill{Dst: tDataGA, Len: 4096, Pattern: 0x01020304})
	cmds = append(cmds, KernelLoad{Handle: 40, Kind: abi.KernelRender})
	cmds = append(cmds, p.batch(40)...)
	src.push(cmds...)
	src.doorbell()
	<-fired
	wait()
	m.run(cmds...)

	s, err := src.e.Save()
	if err != nil {
		t.Fatal(err)
	}
	if !s.Enabled || s.Head == s.Tail || s.Tail != src.tail || len(s.Kernels) < 3 {
		t.Fatalf("saved state %+v: want pending work and kernels", s)
	}

	dst := newHarness(t, 32, 4096) // another partition, another page order
	if dst.gtt.pages[0] == src.gtt.pages[0] {
		t.Fatal("test needs different mappings")
	}
	dst.e.Quiesce()
	dst.write(0, src.read(0, tGAPages*abi.PageSize)) // graphics memory travels separately
	copy(dst.ram.mem, src.ram.mem)
	if err := dst.e.Restore(s); err != nil {
		t.Fatal(err)
	}
	if r := dst.e.Regs(); r.Head != s.Head || r.Tail != s.Tail || r.RingSize != 8192 || r.CmdsDone != s.CmdsDone {
		t.Fatalf("restored regs %+v from %+v", r, s)
	}
	dst.e.Resume()
	dst.wait()
	m.check(t, dst)
	if r := dst.e.Regs(); r.CmdsDone != uint64(len(cmds)) || r.Busy {
		t.Fatalf("regs %+v, want %d commands", r, len(cmds))
	}
	if f := dst.ev.takeFaults(); len(f) != 0 {
		t.Fatalf("faults %+v", f)
	}
	s2, err := dst.e.Save() // still quiesced? No: resumed.
	if !errors.Is(err, ErrNotQuiesced) {
		t.Fatalf("Save while running: %v, %+v", err, s2)
	}
	if err := dst.e.Restore(s); !errors.Is(err, ErrNotQuiesced) {
		t.Fatalf("Restore while running: %v", err)
	}
}

func TestEngineRestoreValidation(t *testing.T) {
	t.Parallel()
	good := State{RingBase: 0x10000, RingSize: 8192, Head: 16, Tail: 64, Enabled: true,
		Kernels: []KernelObject{{1, abi.KernelSaxpy}, {2, abi.KernelRender}}}
	many := make([]KernelObject, abi.MaxKernels+1)
	for i := range many {
		many[i] = KernelObject{uint32(i + 1), abi.KernelStencil}
	}
	bad := map[string]func(*State){
		"head misaligned":  func(s *State) { s.Head = 4 },
		"tail misaligned":  func(s *State) { s.Tail = 65 },
		"ring size":        func(s *State) { s.RingSize = 12288 },
		"ring base":        func(s *State) { s.RingBase = 0x10008 },
		"head outside":     func(s *State) { s.Head = 8192 },
		"handle zero":      func(s *State) { s.Kernels = []KernelObject{{0, 1}} },
		"handle repeated":  func(s *State) { s.Kernels = []KernelObject{{3, 1}, {3, 2}} },
		"unknown kind":     func(s *State) { s.Kernels = []KernelObject{{3, 7}} },
		"too many kernels": func(s *State) { s.Kernels = many },
	}
	e := New(Config{Backend: NewSoftware(nil), GTT: &fakeGTT{}})
	if err := e.Restore(good); err != nil {
		t.Fatal(err)
	}
	for name, f := range bad {
		s := good
		s.Kernels = append([]KernelObject(nil), good.Kernels...)
		f(&s)
		if err := e.Restore(s); !errors.Is(err, ErrBadState) {
			t.Errorf("%s: %v, want ErrBadState", name, err)
		}
	}
	got, err := e.Save() // unchanged by the refused restores
	if err != nil {
		t.Fatal(err)
	}
	if got.Head != good.Head || len(got.Kernels) != 2 || got.Kernels[1] != good.Kernels[1] {
		t.Fatalf("state %+v after refused restores", got)
	}
	// A disabled ring may hold any base and size.
	if err := e.Restore(State{RingBase: 3, RingSize: 5, Head: 8, Tail: 8}); err != nil {
		t.Fatal(err)
	}
}

func TestEngineControl(t *testing.T) {
	t.Parallel()
	e := New(Config{Backend: NewSoftware(nil), GTT: &fakeGTT{}})
	e.Start()
	defer e.Close()
	if err := e.Doorbell(0); !errors.Is(err, ErrBadDoorbell) {
		t.Fatalf("doorbell on disabled ring: %v", err)
	}
	for _, r := range []struct {
		base uint64
		size uint32
	}{{0x1001, 4096}, {0, 0}, {0, 2048}, {0, 3 << 12}, {0, 2 << 20}, {^uint64(0) &^ 4095, 8192}} {
		e.SetRingBase(r.base)
		e.SetRingSize(r.size)
		if err := e.SetEnabled(true); !errors.Is(err, ErrBadRing) {
			t.Errorf("enable %#x/%#x: %v, want ErrBadRing", r.base, r.size, err)
		}
		if e.Regs().Enabled {
			t.Fatal("enabled with a bad ring")
		}
	}
	e.SetRingBase(0x4000)
	e.SetRingSize(4096)
	if err := e.SetEnabled(true); err != nil {
		t.Fatal(err)
	}
	e.SetRingBase(0x8000) // ignored while enabled
	e.SetRingSize(8192)
	if r := e.Regs(); r.RingBase != 0x4000 || r.RingSize != 4096 || !r.Enabled {
		t.Fatalf("regs %+v", r)
	}
	for _, tail := range []uint32{4, 4096, 1 << 31} {
		if err := e.Doorbell(tail); !errors.Is(err, ErrBadDoorbell) {
			t.Errorf("doorbell %#x: %v", tail, err)
		}
	}
	if r := e.Regs(); r.Tail != 0 {
		t.Fatalf("refused doorbells moved the tail: %+v", r)
	}
}

func TestEngineReset(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 33, 4096)
	h.submit(KernelLoad{Handle: 5, Kind: abi.KernelRender}, Fence{Value: 3})
	h.e.Reset()
	if r := h.e.Regs(); r != (Regs{}) {
		t.Fatalf("regs after reset %+v", r)
	}
	h.e.SetRingBase(tRingGA)
	h.e.SetRingSize(4096)
	if err := h.e.SetEnabled(true); err != nil {
		t.Fatal(err)
	}
	h.tail = 0
	offs := h.submit(Launch{Handle: 5, Args: []uint64{1, 1, tDataGA, 0}})
	checkFaults(t, "after reset", h.ev.takeFaults(), Fault{Code: abi.ErrKernel, RingOffset: offs[0], Opcode: abi.OpLaunch})

	// A quiesced engine stays quiesced across a reset.
	h.e.Quiesce()
	h.e.Reset()
	if _, err := h.e.Save(); err != nil {
		t.Fatalf("Save after reset of a quiesced engine: %v", err)
	}
	h.e.Resume()
}

func TestEngineRegsConcurrent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 34, 8192)
	p := &program{rng: rand.New(rand.NewPCG(34, 2))}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var last uint64
			for {
				select {
				case <-stop:
					return
				default:
				}
				r := h.e.Regs()
				if r.CmdsDone < last || r.Head >= r.RingSize || r.Busy != (r.Head != r.Tail) {
					t.Errorf("regs %+v after %d commands", r, last)
					return
				}
				last = r.CmdsDone
			}
		}()
	}
	h.submit(p.loads()...)
	for range 5 {
		h.submit(p.batch(40)...)
	}
	close(stop)
	wg.Wait()
}

func TestEngineLifecycle(t *testing.T) {
	t.Parallel()
	e := New(Config{Backend: NewSoftware(nil), GTT: &fakeGTT{}})
	e.Quiesce() // not running: just parks
	e.Resume()
	e.Start()
	e.Start()
	e.Quiesce()
	e.Quiesce()
	if _, err := e.Save(); err != nil {
		t.Fatal(err)
	}
	e.Resume()
	if err := e.WaitIdle(context.Background()); err != nil {
		t.Fatal(err)
	}
	e.Close()
	e.Close()
	e.Quiesce() // after Close: returns at once
	e.Resume()
	if _, err := e.Save(); err != nil {
		t.Fatalf("Save after Close: %v", err)
	}
	// WaitIdle gives up with its context.
	e2 := New(Config{Backend: NewSoftware(nil), GTT: &fakeGTT{}})
	e2.SetRingSize(4096)
	if err := e2.SetEnabled(true); err != nil {
		t.Fatal(err)
	}
	if err := e2.Doorbell(8); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e2.WaitIdle(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitIdle on a stopped engine with work: %v", err)
	}
	e2.Close()
}
