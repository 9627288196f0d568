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
	"github.com/gmig-dev/gmig/internal/memprobe"
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

// hostResident is how many pages of v's host local range (the receive
// buffer, vgpu.LocalMemory) hold memory; measure it before anything reads
// the range (a read maps the zero page, which counts).
func hostResident(t *testing.T, v *vgpu.VGPU) int {
	t.Helper()
	n, err := memprobe.Resident(v.LocalMemory())
	must(t, err)
	return n
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
	// The destination gave the host pages back once they were on its
	// GPU: none of its local range is resident (without that it held all
	// 64 received pages), yet its GPU holds the source's bytes (below),
	// the five pages re-sent at the stop (discarded after the pre-copy's
	// flush, received again) included; the guest running there does not
	// bring them back (at the end).
	held := hostResident(t, dst.V)
	if held != 0 {
		t.Errorf("the destination's host local range holds %d resident pages after the migration, want 0 (all %d are on its GPU)", held, localBytes/pg)
	}

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
	if n := hostResident(t, dst.V); n > held {
		t.Errorf("the guest's work on the destination brought %d host local pages back", n-held)
	}
}

// TestGPULocalMemoryStopCopy: stop-and-copy reads every local page from
// the GPU at the stop; the destination loads them all before the restore
// and gives their host pages back after its verdict.
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
	if n := hostResident(t, dst.V); n != 0 {
		t.Errorf("the destination's host local range holds %d resident pages after the migration, want 0", n)
	}
	if rep.Stop.LocalPages != localBytes/stream.PageSize {
		t.Errorf("local pages at the stop %d, want all %d", rep.Stop.LocalPages, localBytes/stream.PageSize)
	}
	if !bytes.Equal(gpuLocal(t, src.V), gpuLocal(t, dst.V)) {
		t.Fatal("destination local memory differs from the source's")
	}
}

// TestGPULocalMemoryMigratesBack: a cuda vGPU migrates from model GPU 0
// to GPU 1 and, after its guest wrote local memory there, on to a fresh
// vGPU on GPU 0 (the first source closed, freeing its device address).
// The second migration's source is a destination whose host receive
// buffer was given back: it reads local memory from its GPU, never from
// that buffer, so what arrives equals what it held — the first hop's
// bytes and the guest's new page — and neither host range holds pages
// afterwards.
func TestGPULocalMemoryMigratesBack(t *testing.T) {
	save := flushPages
	flushPages = 8
	defer func() { flushPages = save }()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, dst := cudaLocalPair(t)
	vm, ga := localGuest(ctx, t, src)
	d := vm.Driver()
	migrate := func(from, to *migtest.Served) {
		t.Helper()
		a, b := migtest.TCPPair(t)
		recv := receive(ctx, b, to.V, Options{Log: migtest.Log})
		s, err := NewSource(from.V, a, Options{Strategy: OneShot, Workers: 2, SerialStop: true, Log: migtest.Log})
		must(t, err)
		defer s.Close()
		must(t, s.Precopy(ctx))
		_, err = s.Stop(ctx)
		must(t, err)
		must(t, (<-recv).err)
	}

	migrate(src, dst)
	first := gpuLocal(t, src.V)
	migtest.MoveTo(t, vm, dst)
	dst.V.Resume()
	const pg = stream.PageSize
	must(t, d.Fill(ga+28*pg, pg, 0x0badf00d)) // local page 28 (the guest allocated 0-31), on GPU 1
	must(t, d.Wait(ctx, d.Fence(0)))
	must(t, src.V.Close())
	back := localVGPUOn(t, vgpu.Config{Name: "back", Backend: vgpu.BackendCUDA, GPU: 0}, 2*localGfx)

	migrate(dst, back)
	if n := hostResident(t, dst.V); n != 0 {
		t.Errorf("the second migration's source holds %d host local pages, want 0: it reads local memory from its GPU", n)
	}
	if n := hostResident(t, back.V); n != 0 {
		t.Errorf("the last destination holds %d host local pages, want 0", n)
	}
	left, got := gpuLocal(t, dst.V), gpuLocal(t, back.V)
	if !bytes.Equal(got, left) {
		t.Fatal("the local memory that came back differs from what left GPU 1")
	}
	if !bytes.Equal(got[:16*pg], first[:16*pg]) || bytes.Count(got[28*pg:29*pg], []byte{0x0d, 0xf0, 0xad, 0x0b}) != pg/4 {
		t.Error("the first hop's bytes or the guest's page on GPU 1 did not come back")
	}
}
