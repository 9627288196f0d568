package precopy

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/precopy/stream"
	"github.com/gmig-dev/gmig/vgpu"
)

const (
	localGfx   = 1 << 20              // graphics memory: 256 pages
	localBytes = 64 * stream.PageSize // device-local memory: 64 pages
)

// localVGPU serves a vGPU with device-local memory; pad bytes of another
// partition go first, so source and destination sit at different pool
// offsets.
func localVGPU(t *testing.T, name string, pad uint64) *migtest.Served {
	t.Helper()
	return localVGPUOn(t, vgpu.Config{Name: name}, pad)
}

// localVGPUOn is localVGPU with c's name, back end and GPU.
func localVGPUOn(t *testing.T, c vgpu.Config, pad uint64) *migtest.Served {
	t.Helper()
	p := migtest.NewPool(t, 4*localGfx)
	if pad > 0 {
		migtest.NewVGPUConfig(t, p, vgpu.Config{Name: c.Name + "-pad", MemSize: pad, GTTEntries: 16})
	}
	c.MemSize, c.GTTEntries, c.LocalMemSize = localGfx, 1024, localBytes
	return migtest.Serve(t, migtest.NewVGPUConfig(t, p, c))
}

// localGuest is a guest that allocated 32 pages of local memory and wrote
// the first 16 through commands (DMA of random bytes, FILL).
func localGuest(ctx context.Context, t *testing.T, s *migtest.Served) (*sim.VM, uint64) {
	t.Helper()
	vm := migtest.Attach(t, s, 3, sim.Options{})
	d := vm.Driver()
	ga, err := d.AllocLocal(32 * stream.PageSize)
	if err != nil {
		t.Fatal(err)
	}
	gpa, ram, err := vm.Bus().DMA().Alloc(8 * stream.PageSize)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range ram {
		ram[i] = byte(rng.Uint32())
	}
	must(t, d.DMAToGfx(ga, gpa, 8*stream.PageSize))
	must(t, d.Fill(ga+8*stream.PageSize, 8*stream.PageSize, 0xc0ffee00))
	must(t, d.Wait(ctx, d.Fence(0)))
	return vm, ga
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestLocalMemoryMigrates: a guest's device-local memory, written by
// commands before and during the migration (COPY, FILL, DMA_TO_GFX into
// local pages), arrives byte for byte at a destination in another pool
// place; the stop phase sends exactly the four local pages written after
// the pre-copy, hashes no local page (the final scan hashes at most the
// graphics pages), and on the destination the guest reaches the migrated
// local memory at the same graphics addresses. It runs with the stop
// phase on one stream and on three (local pages go on the first; every
// stream's reader shares the claim over the pages).
func TestLocalMemoryMigrates(t *testing.T) {
	for _, k := range []int{1, 3} {
		t.Run(fmt.Sprintf("streams=%d", k), func(t *testing.T) { testLocalMigrates(t, k) })
	}
}

func testLocalMigrates(t *testing.T, k int) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, dst := localVGPU(t, "src", 0), localVGPU(t, "dst", localGfx)
	vm, ga := localGuest(ctx, t, src)
	d := vm.Driver()

	s, recv, _ := startOnStreams(ctx, t, src.V, dst.V, k, Options{Strategy: OneShot, Workers: 2, SerialStop: true, Log: migtest.Log})
	if s.Pages() != localGfx/stream.PageSize+localBytes/stream.PageSize {
		t.Errorf("Pages = %d, want graphics and local pages", s.Pages())
	}
	must(t, s.Precopy(ctx))
	gpa, ram, err := vm.Bus().DMA().Alloc(stream.PageSize)
	must(t, err)
	copy(ram, bytes.Repeat([]byte("local!"), 1000))
	const pg = stream.PageSize
	must(t, d.Copy(ga+20*pg, ga, 2*pg))           // local pages 20, 21
	must(t, d.Fill(ga+25*pg+64, 128, 0x11223344)) // local page 25
	must(t, d.DMAToGfx(ga+30*pg+pg/2, gpa, 16))   // local page 30
	must(t, d.Wait(ctx, d.Fence(0)))
	rep, err := s.Stop(ctx)
	must(t, err)
	r := <-recv
	must(t, r.err)

	if rep.Stop.Streams != k {
		t.Errorf("stop phase on %d streams, want %d", rep.Stop.Streams, k)
	}
	if rep.Stop.LocalPages != 4 || r.rep.Stop.LocalPages != 4 {
		t.Errorf("local pages sent at the stop: source %d, destination %d; want exactly 4", rep.Stop.LocalPages, r.rep.Stop.LocalPages)
	}
	if rep.Stop.PagesHashed > localGfx/stream.PageSize {
		t.Errorf("the final scan hashed %d pages, more than the %d graphics pages", rep.Stop.PagesHashed, localGfx/stream.PageSize)
	}
	if rep.Stop.BySource[dirty.Engine] < 4 {
		t.Errorf("by source %v: the local pages are not engine-marked", rep.Stop.BySource)
	}
	if !bytes.Equal(src.V.LocalMemory(), dst.V.LocalMemory()) || !bytes.Equal(src.V.Memory(), dst.V.Memory()) {
		t.Fatal("destination memory differs from the source's")
	}
	if src.V.Partition().Offset == dst.V.Partition().Offset {
		t.Fatal("source and destination at the same pool offset: remapping untested")
	}

	migtest.MoveTo(t, vm, dst)
	dst.V.Resume()
	back, err := d.Alloc(pg)
	must(t, err)
	must(t, d.Copy(back, ga+30*pg, pg))
	must(t, d.Wait(ctx, d.Fence(0)))
	got := make([]byte, pg)
	must(t, d.ReadGA(back, got))
	if !bytes.Equal(got, src.V.LocalMemory()[30*pg:31*pg]) {
		t.Error("on the destination, the guest's local graphics addresses do not reach the migrated page")
	}
}

// TestLocalMemoryStopCopy: stop-and-copy sends nothing live and every
// local page at the stop, hashing none of them to decide.
func TestLocalMemoryStopCopy(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, dst := localVGPU(t, "src", 0), localVGPU(t, "dst", localGfx)
	localGuest(ctx, t, src)
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
	if !bytes.Equal(src.V.LocalMemory(), dst.V.LocalMemory()) {
		t.Fatal("destination local memory differs from the source's")
	}
}

// TestLocalMemorySpecRefused: a destination whose vGPU has no local memory
// refuses a source with it before any page (the begin Meta's spec).
func TestLocalMemorySpecRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := localVGPU(t, "src", 0)
	dst := migtest.ServeNew(t, migtest.NewPool(t, 2*localGfx), "dst", localGfx)
	a, b := migtest.TCPPair(t)
	recv := receive(ctx, b, dst.V, Options{Log: migtest.Log})
	s, err := NewSource(src.V, a, Options{Strategy: OneShot, Workers: 2, Log: migtest.Log})
	must(t, err)
	defer s.Close()
	if err := s.Precopy(ctx); err == nil {
		_, err = s.Stop(ctx)
		if err == nil {
			t.Fatal("the source migrated to a destination without local memory")
		}
	}
	s.Rollback() // half-closes: the destination stops draining
	r := <-recv
	if r.err == nil || !bytes.Contains([]byte(r.err.Error()), []byte("local memory size")) {
		t.Errorf("destination without local memory: %v, want a refusal naming the local memory size", r.err)
	}
}
