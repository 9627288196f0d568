package precopy

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/gtt"
	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/precopy/stream"
	"github.com/gmig-dev/gmig/vgpu"
)

// Device-local memory of a cuda vGPU migrating between two model GPUs
// (GMIG_CUDA_MODEL=2; each model GPU has an address range of its own, as
// another host's GPU has, so the destination gets the source's device
// address). Local memory lives on the GPU alone; pages a guest kernel
// writes behind the engine's back are found by the GPU page hash.

// cudaLocalPair serves a source vGPU with local memory on model GPU 0 and
// a destination on model GPU 1, at another pool offset.
func cudaLocalPair(t *testing.T) (src, dst *migtest.Served) { return cudaLocalPairOn(t, 1) }

// cudaLocalPairOn is cudaLocalPair with the destination on model GPU
// dstGPU (0: the source's; each vGPU has a GPU worker of its own).
func cudaLocalPairOn(t *testing.T, dstGPU int) (src, dst *migtest.Served) {
	t.Setenv(nvidia.ModelEnv, "2")
	src = localVGPUOn(t, vgpu.Config{Name: "src", Backend: vgpu.BackendCUDA, GPU: 0}, 0)
	dst = localVGPUOn(t, vgpu.Config{Name: "dst", Backend: vgpu.BackendCUDA, GPU: dstGPU}, localGfx)
	return src, dst
}

// gpuLocal reads all of a cuda vGPU's local memory through its back end
// (the vGPU quiesced).
func gpuLocal(t *testing.T, v *vgpu.VGPU) []byte {
	t.Helper()
	b := make([]byte, localBytes)
	must(t, v.GPU().Read(b, []gtt.Extent{{Off: v.Partition().ApertureEnd(), Len: localBytes}}))
	return b
}

// TestGPULocalMemoryMigrates: a cuda vGPU's local memory, written by
// commands before and after the pre-copy and by a "kernel" behind the
// engine's back (straight to its device address), arrives whole: the
// stop phase sends exactly the five pages that changed, found by the GPU
// hash (the report says gpu-hash), the destination's DEVICE_ADDR_BASE is
// the source's, the pool's local range is never touched on the source,
// and the guest reaches the kernel's bytes on the destination.
//
// It runs with the stop phase on one stream and on three, and with the
// destination copying arrived local pages to its GPU every 8 pages (so
// during the pre-copy too, and pages sent twice are copied twice). The
// destination is on another model GPU, and (one-gpu) on the source's own
// GPU in the same process: each vGPU's GPU worker has a device address
// space of its own, so the destination gets the source's
// DEVICE_ADDR_BASE beside it.
func TestGPULocalMemoryMigrates(t *testing.T) {
	save := flushPages
	flushPages = 8
	defer func() { flushPages = save }()
	for _, k := range []int{1, 3} {
		t.Run(fmt.Sprintf("streams=%d", k), func(t *testing.T) { testGPULocalMigrates(t, k, 1) })
	}
	t.Run("one-gpu", func(t *testing.T) { testGPULocalMigrates(t, 1, 0) })
}

func testGPULocalMigrates(t *testing.T, k, dstGPU int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, dst := cudaLocalPairOn(t, dstGPU)
	vm, ga := localGuest(ctx, t, src)
	d := vm.Driver()
	s, recv, _ := startOnStreams(ctx, t, src.V, dst.V, k, Options{Strategy: OneShot, Workers: 2, SerialStop: true, Log: migtest.Log})
	must(t, s.Precopy(ctx))

	const pg = stream.PageSize
	must(t, d.Copy(ga+20*pg, ga, 2*pg))           // local pages 20, 21
	must(t, d.Fill(ga+25*pg+64, 128, 0x11223344)) // local page 25
	must(t, d.Wait(ctx, d.Fence(0)))
	kernel := []byte("written by a guest kernel, unseen by the engine")
	g := src.V.GPU()
	must(t, g.ModelWrite(g.DeviceAddrBase()+30*pg+123, kernel))        // local page 30 (the guest allocated 0-31)
	must(t, g.ModelWrite(g.DeviceAddrBase()+localBytes-8, kernel[:8])) // local page 63
	must(t, g.ModelWrite(g.DeviceAddrBase()+3*pg, make([]byte, 0)))    // nothing
	rep, err := s.Stop(ctx)
	must(t, err)
	r := <-recv
	must(t, r.err)

	if rep.Stop.Streams != k {
		t.Errorf("stop phase on %d streams, want %d", rep.Stop.Streams, k)
	}
	if rep.Stop.LocalPages != 5 || r.rep.Stop.LocalPages != 5 {
		t.Errorf("local pages sent at the stop: source %d, destination %d; want exactly 5", rep.Stop.LocalPages, r.rep.Stop.LocalPages)
	}
	if rep.Stop.BySource[dirty.Hash] < 5 || rep.Stop.BySource[dirty.Engine] != 0 {
		t.Errorf("by source %v: the local pages are not found by hashing", rep.Stop.BySource)
	}
	if want := "gpu-hash 256 KiB"; rep.Stop.LocalMethod != want || !strings.Contains(rep.String(), "local      gpu-hash 256 KiB, 5 pages dirty") {
		t.Errorf("local method %q, want %q; report:\n%s", rep.Stop.LocalMethod, want, rep)
	}
	sl, dl := gpuLocal(t, src.V), gpuLocal(t, dst.V)
	if !bytes.Equal(sl, dl) || !bytes.Equal(src.V.Memory(), dst.V.Memory()) {
		t.Fatal("destination memory differs from the source's")
	}
	if !bytes.Equal(dl[30*pg+123:30*pg+123+len(kernel)], kernel) {
		t.Fatal("the kernel's write did not arrive")
	}
	if sb, db := src.V.GPU().DeviceAddrBase(), dst.V.GPU().DeviceAddrBase(); sb != db {
		t.Errorf("destination local memory at %#x, the source's at %#x", db, sb)
	}
	if !bytes.Equal(src.V.LocalMemory(), make([]byte, localBytes)) {
		t.Error("the source's pool local range was written: local memory must live on the GPU alone")
	}

	migtest.MoveTo(t, vm, dst)
	dst.V.Resume()
	back, err := d.Alloc(pg)
	must(t, err)
	must(t, d.Copy(back, ga+30*pg, pg))
	must(t, d.Wait(ctx, d.Fence(0)))
	got := make([]byte, pg)
	must(t, d.ReadGA(back, got))
	if !bytes.Equal(got, sl[30*pg:31*pg]) {
		t.Error("on the destination, the guest's local graphics addresses do not reach the migrated page")
	}
}

// TestGPULocalMemoryStopCopy: stop-and-copy reads every local page from
// the GPU at the stop.
func TestGPULocalMemoryStopCopy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, dst := cudaLocalPair(t)
	localGuest(ctx, t, src)
	g := src.V.GPU()
	must(t, g.ModelWrite(g.DeviceAddrBase()+50*stream.PageSize, []byte("kernel")))
	a, b := migtest.TCPPair(t)
	recv := receive(ctx, b, dst.V, Options{Log: migtest.Log})
	s, err := NewSource(src.V, a, Options{Strategy: StopCopy, Workers: 2, SerialStop: true, Log: migtest.Log})
	must(t, err)
	defer s.Close()
	must(t, s.Precopy(ctx))
	rep, err := s.Stop(ctx)
	must(t, err)
	must(t, (<-recv).err)
	if rep.Stop.LocalPages != localBytes/stream.PageSize {
		t.Errorf("local pages at the stop %d, want all %d", rep.Stop.LocalPages, localBytes/stream.PageSize)
	}
	if !bytes.Equal(gpuLocal(t, src.V), gpuLocal(t, dst.V)) {
		t.Fatal("destination local memory differs from the source's")
	}
}
