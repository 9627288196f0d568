package vgpu_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/precopy"
	"github.com/gmig-dev/gmig/precopy/native"
	"github.com/gmig-dev/gmig/vfio"
	"github.com/gmig-dev/gmig/vgpu"
)

// TestDMALoggingFromEngineWrites: a VMM that logs the device's DMA over
// vfio-user (the project's client, through the simulator's bus, against
// the vGPU served as gmigd serves it) is told exactly the guest pages the
// engine's DMA_FROM_GFX commands wrote after logging started, in the unit
// it asks for, and nothing once they were reported; writes before START
// are not in it.
func TestDMALoggingFromEngineWrites(t *testing.T) {
	const mem = 4 << 20
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, err := vgpu.New(vgpu.Config{Name: "v", MemSize: mem}, migtest.NewPool(t, 2*mem), migtest.Log)
	if err != nil {
		t.Fatal(err)
	}
	n, err := native.New(v, precopy.Options{Log: migtest.Log})
	if err != nil {
		v.Close()
		t.Fatal(err)
	}
	m := migtest.Attach(t, migtest.ServeDevice(t, v, n), 1, sim.Options{})
	c := m.Bus().Client()
	const pg = vfio.DMALogPageSize
	ga, err := m.Driver().Alloc(4 * pg)
	if err != nil {
		t.Fatal(err)
	}
	gpa, _, err := m.Bus().DMA().Alloc(16 * pg)
	if err != nil {
		t.Fatal(err)
	}
	if gpa%pg != 0 {
		t.Fatalf("guest buffer at %#x, not page-aligned", gpa)
	}
	dmaFrom := func(ga, gpa, n uint64) {
		t.Helper()
		if err := m.Driver().DMAFromGfx(ga, gpa, n); err != nil {
			t.Fatal(err)
		}
		if err := m.Driver().Wait(ctx, m.Driver().Fence(0)); err != nil {
			t.Fatal(err)
		}
	}
	report := func(unit uint64) []uint64 {
		t.Helper()
		bm, err := c.DMALoggingReport(gpa, 16*pg, unit)
		if err != nil {
			t.Fatal(err)
		}
		var bits []uint64
		for i := range uint64(len(bm) * 64) {
			if bm[i/64]&(1<<(i%64)) != 0 {
				bits = append(bits, i)
			}
		}
		return bits
	}

	dmaFrom(ga, gpa, pg) // before START: the VMM's own first pass carries it
	if ps, err := c.DMALoggingStart(pg, []vfio.DMALoggingRange{{IOVA: gpa, Length: 16 * pg}}); err != nil || ps != pg {
		t.Fatalf("START: page size %d, %v", ps, err)
	}
	dmaFrom(ga, gpa+2*pg, pg)           // page 2
	dmaFrom(ga+pg, gpa+5*pg+100, 50)    // inside page 5
	dmaFrom(ga+2*pg, gpa+8*pg-8, 16)    // across pages 7 and 8
	dmaFrom(ga+3*pg, gpa+15*pg+4000, 8) // the last page
	if got, want := report(pg), []uint64{2, 5, 7, 8, 15}; !slices.Equal(got, want) {
		t.Fatalf("reported pages %v, want %v", got, want)
	}
	if got := report(pg); len(got) != 0 {
		t.Fatalf("reported again after the report cleared them: %v", got)
	}
	dmaFrom(ga, gpa+9*pg, 2*pg) // pages 9 and 10: 8 KiB units 4 and 5
	if got, want := report(2*pg), []uint64{4, 5}; !slices.Equal(got, want) {
		t.Fatalf("reported 8 KiB units %v, want %v", got, want)
	}
	if err := c.DMALoggingStop(); err != nil {
		t.Fatal(err)
	}
	if n.DMALog().Logging() {
		t.Fatal("the vGPU still logs after STOP")
	}
}
