package engine

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/abi"
)

// FuzzExec runs arbitrary bytes as a guest's command ring: they are
// written into the ring (a wrap-around start included) and the doorbell
// published up to their end. The engine must go idle, never panic, never
// write a host page that the vGPU's GTT does not map writable (the rest of
// the pool, the read-only page) or that is not its device-local memory
// (reached by device addresses, ABI 1.3), and keep serving: a FILL and a FENCE
// submitted afterwards run.
func FuzzExec(f *testing.F) {
	for _, c := range allCommands {
		f.Add(uint16(0), encode(c))
	}
	f.Add(uint16(abi.RingMinSize-16), cat(encode(Copy{Dst: tDataGA, Src: tDataGA + 8, Len: 4096}), encode(Fence{Value: 9})))
	f.Add(uint16(0), cat(encode(Fill{Dst: tROPage * abi.PageSize, Len: 64, Pattern: 1}), encode(Fill{Dst: tDataGA, Len: 8, Pattern: 2})))
	f.Add(uint16(8), cat(encode(KernelLoad{Handle: 1, Kind: abi.KernelSaxpy}),
		encode(Launch{Handle: 1, Args: []uint64{1 << 20, 0x3f800000, tDataGA, tDataGA + 4}})))
	f.Add(uint16(0), encode(Copy{Dst: tDataGA, Src: tUnmapped, Len: ^uint64(0)}))
	f.Add(uint16(0), encode(DMA{ToGfx: true, GA: tDataGA, GPA: ^uint64(0) - 4095, Len: 8192}))
	f.Add(uint16(0), bytes.Repeat([]byte{0xff}, 64))
	f.Add(uint16(0), cat(encode(LaunchGrid{Handle: 1, Grid: Grid{X: 1, Y: 1, Z: 1, BlockX: 1, BlockY: 1, BlockZ: 1}, Params: tDataGA, Len: 28}),
		encode(Fence{Value: 3})))
	f.Add(uint16(40), encode(LaunchGrid{Handle: 2, Grid: Grid{X: 0, Y: 1 << 20, BlockX: 4096}, Params: ^uint64(0) - 7, Len: 4097}))

	// Device addresses (ABI 1.3): inside local memory, straddling either
	// end of it, between 2^32 and it.
	const b = SoftwareDeviceAddrBase
	f.Add(uint16(0), cat(encode(Fill{Dst: b + 8, Len: 64, Pattern: 3}), encode(Copy{Dst: tDataGA, Src: b, Len: 4096}),
		encode(Fence{WriteMem: true, Addr: b + tLocal - 8, Value: 4})))
	f.Add(uint16(16), cat(encode(Copy{Dst: b + tLocal - 8, Src: tDataGA, Len: 16}), encode(DMA{ToGfx: true, GA: b - 8, Len: 16})))
	f.Add(uint16(0), cat(encode(KernelLoadModule{Handle: 1, Args: 1, Image: b, Len: 64}),
		encode(LaunchParams{Handle: 1, Threads: 1, Params: b + tLocal, Len: 8}), encode(Fill{Dst: 1 << 32, Len: 4})))

	h := newHarness(f, 7, abi.RingMinSize, withLocal(nil))
	// The host pages the vGPU may write: its mapped writable pages.
	writable := make(map[uint64]bool)
	for _, pte := range h.gtt.pages {
		if pte.writable {
			writable[pte.host] = true
		}
	}
	pristine := bytes.Clone(h.pool)
	ram := bytes.Clone(h.ram.mem)
	f.Fuzz(func(t *testing.T, start uint16, ring []byte) {
		copy(h.pool, pristine)
		copy(h.ram.mem, ram)
		h.e.Reset()
		h.e.SetRingBase(tRingGA)
		h.e.SetRingSize(h.ringSize)
		if err := h.e.SetEnabled(true); err != nil {
			t.Fatal(err)
		}
		// Start the batch at a seeded offset: empty fences first, so
		// commands straddle the ring's end.
		h.tail = 0
		for range (uint32(start) % h.ringSize) / 24 {
			h.pushBytes(encode(Fence{}))
		}
		n := min(len(ring), int(h.ringSize)-int(h.tail)-abi.CmdAlign) &^ (abi.CmdAlign - 1)
		n = max(n, 0)
		h.pushBytes(ring[:n])
		if err := h.e.Doorbell(h.tail); err != nil {
			t.Fatal(err)
		}
		idle(t, h)
		for page := uint64(0); page < tPoolPages; page++ {
			if writable[page] {
				continue
			}
			lo, hi := page*abi.PageSize, (page+1)*abi.PageSize
			if !bytes.Equal(h.pool[lo:hi], pristine[lo:hi]) {
				t.Fatalf("host page %d changed: the vGPU does not map it writable", page)
			}
		}
		// Still serving.
		h.pushBytes(cat(encode(Fill{Dst: tDataGA, Len: 8, Pattern: 0x5a5a5a5a}), encode(Fence{Value: 1 << 62})))
		if err := h.e.Doorbell(h.tail); err != nil {
			t.Fatal(err)
		}
		idle(t, h)
		if r := h.e.Regs(); r.FenceDone != 1<<62 || !bytes.Equal(h.read(tDataGA, 8), bytes.Repeat([]byte{0x5a}, 8)) {
			t.Fatalf("after the batch, FILL and FENCE did not run: FENCE_DONE %#x", r.FenceDone)
		}
	})
}

// idle waits for the engine to finish what it was given; a batch that
// keeps it busy for long is a hang.
func idle(t *testing.T, h *harness) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.e.WaitIdle(ctx); err != nil {
		t.Fatalf("engine never went idle: %v (%+v)", err, h.e.Regs())
	}
}

func cat(bs ...[]byte) []byte { return bytes.Join(bs, nil) }
