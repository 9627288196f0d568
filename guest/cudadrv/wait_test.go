package cudadrv

import (
	"bytes"
	"strings"
	"sync"
	"testing"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/vgpu"
)

// regCounts counts register reads by BAR0 offset: each is a round trip to
// gmigd on a real guest.
type regCounts struct {
	mu    sync.Mutex
	reads map[uint32]int
}

func (c *regCounts) add(off uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reads[off]++
}

// take returns the counts so far and starts again.
func (c *regCounts) take() map[uint32]int {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := c.reads
	c.reads = map[uint32]int{}
	return r
}

// countingBus is a guest.Bus that counts its register reads.
type countingBus struct {
	guest.Bus
	c *regCounts
}

func (b countingBus) ReadReg32(off uint32) (uint32, error) {
	b.c.add(off)
	return b.Bus.ReadReg32(off)
}

func (b countingBus) ReadReg64(off uint32) (uint64, error) {
	b.c.add(off)
	return b.Bus.ReadReg64(off)
}

// countingLib is initLibConfig over a bus that counts register reads.
func countingLib(t *testing.T, cfg vgpu.Config, lc Config) (*Lib, *regCounts, *bytes.Buffer) {
	t.Helper()
	l, log := newLib(t, cfg)
	c := &regCounts{reads: map[uint32]int{}}
	open := l.cfg.Open
	l.cfg.Open = func() (guest.Bus, error) {
		b, err := open()
		if err != nil {
			return nil, err
		}
		return countingBus{Bus: b, c: c}, nil
	}
	l.cfg.DMACopies, l.cfg.StagingChunk = lc.DMACopies, lc.StagingChunk
	must(t, l.Init(0))
	_, r := l.CtxCreate(thread, 0, 0)
	must(t, r)
	return l, c, log
}

// TestWaitPollsFenceMemory: on a vGPU whose fences write memory (CAPS bit
// 1) a synchronised host copy through many staging slots waits for each
// slot's fence in the fence slot, not FENCE_DONE: no FENCE_DONE read at
// all, and about one ERR_STATUS read (the verdict) per wait. Before, every
// wait read FENCE_DONE at least twice and ERR_STATUS once or more.
func TestWaitPollsFenceMemory(t *testing.T) {
	l, c, _ := countingLib(t, localConfig(), Config{StagingChunk: 64 << 10})
	if !l.memFences {
		t.Fatalf("CAPS %#x: the software vGPU's fences do not write memory", l.Driver().Caps())
	}
	const n = 4 << 20 // 64 chunks of 64 KiB over 4 slots: 60 slot waits
	a, r := l.MemAlloc(thread, n)
	must(t, r)
	src := pattern(n, 5)
	c.take()
	must(t, l.MemcpyHtoD(thread, a, src))
	must(t, l.CtxSynchronize(thread))
	reads := c.take()
	if l.stage.chunk != 64<<10 {
		t.Fatalf("staging chunk %d, want the configured 65536", l.stage.chunk)
	}
	waits := n/int(l.stage.chunk) - stagingSlots + 1
	t.Logf("%d waits: register reads %v", waits, reads)
	if reads[abi.RegFenceDone] != 0 {
		t.Errorf("%d FENCE_DONE reads during %d waits, want none (the fence slot is polled)", reads[abi.RegFenceDone], waits)
	}
	if e := reads[abi.RegErrStatus]; e < waits {
		t.Errorf("%d ERR_STATUS reads for %d waits: a wait skipped the device's verdict", e, waits)
	}
	got := make([]byte, n)
	must(t, l.MemcpyDtoH(thread, got, a))
	if i := firstDiff(got, src); i >= 0 {
		t.Fatalf("byte %d is %#x, want %#x", i, got[i], src[i])
	}
}

// TestDroppedFenceEndsWait: a command that fails framing drops the rest of
// its batch, the library's fence with it (docs/device-abi.md §5), so the
// fence never lands in the fence slot; the wait still ends, once it reads
// ERR_STATUS, with the result and error that polling FENCE_DONE gives
// (memFences false: a device without CAPS bit 1), and later work runs. A
// cuCtxSynchronize with nothing submitted since returns rather than wait
// for the dropped fence again (it did wait forever, either way).
func TestDroppedFenceEndsWait(t *testing.T) {
	var results []Result
	for _, mem := range []bool{false, true} {
		l, log := newLib(t, localConfig())
		must(t, l.Init(0))
		_, r := l.CtxCreate(thread, 0, 0)
		must(t, r)
		if !l.memFences {
			t.Fatalf("CAPS %#x: the software vGPU's fences do not write memory", l.Driver().Caps())
		}
		l.mu.Lock()
		l.memFences = mem
		bad := make([]byte, 8)
		bad[0] = 0xff // opcode 255: a framing error
		bad[4] = 8    // size
		if err := l.d.Submit(bad); err != nil {
			l.mu.Unlock()
			t.Fatal(err)
		}
		l.pending = true // the fence follows it in the same batch
		res := l.syncLocked()
		l.mu.Unlock()
		if res == Success {
			t.Fatalf("memory fences %v: cuCtxSynchronize after a dropped batch succeeded", mem)
		}
		if !strings.Contains(log.String(), guest.ErrFenceLost.Error()) {
			t.Errorf("memory fences %v: the log does not say the fence was dropped:\n%s", mem, log)
		}
		results = append(results, res)
		must(t, l.CtxSynchronize(thread))
		a, r := l.MemAlloc(thread, 4096)
		must(t, r)
		src := pattern(4096, 9)
		must(t, l.MemcpyHtoD(thread, a, src))
		got := make([]byte, 4096)
		must(t, l.MemcpyDtoH(thread, got, a))
		if !bytes.Equal(got, src) {
			t.Fatalf("memory fences %v: a copy after the dropped batch read back other bytes", mem)
		}
	}
	if results[0] != results[1] {
		t.Fatalf("a dropped fence: %v waiting on the fence slot, %v polling FENCE_DONE", results[1], results[0])
	}
}

// TestQueryReadsFenceMemory: cuEventQuery of an event whose fence has not
// landed answers CUDA_ERROR_NOT_READY from the fence slot alone, with no
// register read; once it landed, success after one ERR_STATUS read.
func TestQueryReadsFenceMemory(t *testing.T) {
	l, c, _ := countingLib(t, localConfig(), Config{})
	e, r := l.EventCreate(thread, 0)
	must(t, r)
	must(t, l.EventRecord(thread, e, 0))
	must(t, l.EventSynchronize(e))
	c.take()
	must(t, l.EventQuery(e))
	if reads := c.take(); reads[abi.RegFenceDone] != 0 || reads[abi.RegErrStatus] != 1 || len(reads) != 1 {
		t.Errorf("cuEventQuery of a completed event read %v, want ERR_STATUS once", reads)
	}
	// The next fence, not issued yet, cannot have landed.
	l.mu.Lock()
	ev := l.objs[e].(*event)
	ev.fence = l.d.LastFence() + 1
	l.memFence = ev.fence
	l.mu.Unlock()
	want(t, "cuEventQuery of an event whose fence is not in", l.EventQuery(e), ErrNotReady)
	if reads := c.take(); len(reads) != 0 {
		t.Errorf("cuEventQuery of a pending event read registers %v, want none", reads)
	}
	must(t, l.EventRecord(thread, e, 0)) // that fence, issued
	must(t, l.EventSynchronize(e))
}

func TestParseStagingChunk(t *testing.T) {
	good := map[string]uint64{"4096": 4096, "64K": 64 << 10, "4M": 4 << 20, "8m": 8 << 20, "2MiB": 2 << 20, "1G": 1 << 30}
	for in, w := range good {
		if got, err := ParseStagingChunk(in); err != nil || got != w {
			t.Errorf("ParseStagingChunk(%q) = %d, %v; want %d", in, got, err, w)
		}
	}
	for _, in := range []string{"", "0", "-1M", "4097", "1000", "1.5M", "4X", "lots"} {
		if got, err := ParseStagingChunk(in); err == nil {
			t.Errorf("ParseStagingChunk(%q) = %d, accepted", in, got)
		}
	}
}
