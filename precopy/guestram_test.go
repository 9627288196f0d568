package precopy

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/precopy/stream"
)

// TestGuestRAMTheDeviceWrote: what the engine writes into guest RAM by
// DMA while the vGPU migrates reaches the destination's RAM, as it was
// when the VM stopped (a guest CPU store after the DMA included), though
// the destination VMM's RAM never saw it; what it wrote before the
// migration began is left to the VMM's own migration.
func TestGuestRAMTheDeviceWrote(t *testing.T) {
	const mem = 4 << 20
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src := migtest.ServeNew(t, migtest.NewPool(t, 2*mem), "src", mem)
	m := migtest.Attach(t, src, 1, sim.Options{})
	d := m.Driver()
	ga, err := d.Alloc(4 * stream.PageSize)
	if err != nil {
		t.Fatal(err)
	}
	content := make([]byte, 4*stream.PageSize)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range content {
		content[i] = byte(rng.Uint32() | 1)
	}
	if err := d.WriteGA(ga, content); err != nil {
		t.Fatal(err)
	}
	gpa, ram, err := m.Bus().DMA().Alloc(8 * stream.PageSize)
	if err != nil {
		t.Fatal(err)
	}
	dmaFrom := func(ga, gpa, n uint64) {
		t.Helper()
		if err := d.DMAFromGfx(ga, gpa, n); err != nil {
			t.Fatal(err)
		}
		if err := d.Wait(ctx, d.Fence(0)); err != nil {
			t.Fatal(err)
		}
	}
	// Before the migration: the VMM's first pass over RAM carries it.
	dmaFrom(ga, gpa, stream.PageSize)

	dst := migtest.ServeNew(t, migtest.NewPool(t, 2*mem), "dst", mem)
	a, b := migtest.TCPPair(t)
	recv := receive(ctx, b, dst.V, Options{Log: migtest.Log})
	s, err := NewSource(src.V, a, Options{Strategy: OneShot, Workers: 2, Log: migtest.Log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Precopy(ctx); err != nil {
		t.Fatal(err)
	}
	// During the migration: a whole page, two pieces of one page (one
	// span covers both), and a range across a page boundary.
	dmaFrom(ga+stream.PageSize, gpa+2*stream.PageSize, stream.PageSize)
	dmaFrom(ga+2*stream.PageSize, gpa+3*stream.PageSize+100, 50)
	dmaFrom(ga+2*stream.PageSize+200, gpa+3*stream.PageSize+1000, 24)
	dmaFrom(ga+3*stream.PageSize, gpa+5*stream.PageSize-8, 16)
	// The guest CPU stores into a page the device wrote, after the DMA.
	ram[2*stream.PageSize+7] ^= 0xff
	rep, err := s.Stop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := <-recv
	if r.err != nil {
		t.Fatal(r.err)
	}
	// Pages 2, 3, 4 and 5 of the RAM buffer (its first page was written
	// before the migration and page 1 never).
	if rep.Stop.GuestRAMPages != 4 || r.rep.Stop.GuestRAMPages != 4 || r.rep.GuestRAM.Ranges() != 4 {
		t.Fatalf("guest RAM pages: source %d, destination %d (%d ranges), want 4",
			rep.Stop.GuestRAMPages, r.rep.Stop.GuestRAMPages, r.rep.GuestRAM.Ranges())
	}
	if want := uint64(stream.PageSize + (1024 - 100) + 8 + 8); r.rep.GuestRAM.Bytes() != want {
		t.Errorf("guest RAM bytes %d, want %d", r.rep.GuestRAM.Bytes(), want)
	}
	if rep.GuestRAM != nil {
		t.Error("the source's report holds guest RAM")
	}

	// The destination VMM's RAM: loaded without the device's writes.
	m2, err := sim.Attach(dst.Path, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	stale := m2.RAM()
	if err := r.rep.GuestRAM.WriteTo(dst.V); err != nil {
		t.Fatal(err)
	}
	got := stale[gpa : gpa+8*stream.PageSize]
	want := bytes.Clone(ram)
	clear(want[:stream.PageSize]) // before the migration: not carried
	clear(want[3*stream.PageSize : 3*stream.PageSize+100])
	clear(want[3*stream.PageSize+1024 : 4*stream.PageSize])
	clear(want[4*stream.PageSize : 5*stream.PageSize-8])
	clear(want[5*stream.PageSize+8:])
	if !bytes.Equal(got, want) {
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("destination RAM at %#x: %#x, want %#x", gpa+uint64(i), got[i], want[i])
			}
		}
	}
	if got[2*stream.PageSize+7] != content[stream.PageSize+7]^0xff {
		t.Error("the guest CPU's store after the DMA is not in the carried page")
	}
}

// TestGuestRAMRefuses: malformed GuestRAM payloads are refused with the
// reason, and nothing of them is kept.
func TestGuestRAMRefuses(t *testing.T) {
	rec := func(gpa uint64, n uint32, data int) []byte {
		b := binary.LittleEndian.AppendUint64(nil, gpa)
		b = binary.LittleEndian.AppendUint32(b, n)
		return append(b, make([]byte, data)...)
	}
	for _, c := range []struct {
		name, want string
		b          []byte
	}{
		{"empty", "empty", nil},
		{"short header", "record header", rec(0, 1, 1)[:7]},
		{"zero length", "empty range", rec(0x1000, 0, 0)},
		{"crosses a page", "crosses a page", rec(0x1ff0, 32, 32)},
		{"longer than the page", "crosses a page", rec(0, 4097, 4097)},
		{"truncated data", "has 16 bytes", rec(0x1000, 16, 8)},
		{"after a good record", "record header", append(rec(0x2000, 4, 4), 1, 2, 3)},
	} {
		var g GuestRAM
		err := g.add(c.b)
		if !errors.Is(err, errGuestRAM) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
		if g.Ranges() != 0 || g.Bytes() != 0 {
			t.Errorf("%s: %d ranges and %d bytes kept", c.name, g.Ranges(), g.Bytes())
		}
	}
	var g GuestRAM
	if err := g.add(append(rec(0x3008, 8, 0), 1, 2, 3, 4, 5, 6, 7, 8)); err != nil || g.Ranges() != 1 || g.Bytes() != 8 {
		t.Fatalf("a good record: %v, %d ranges, %d bytes", err, g.Ranges(), g.Bytes())
	}
}

// TestGuestRAMNote: the spans of the written ranges, per page.
func TestGuestRAMNote(t *testing.T) {
	var w ramWrites
	w.note(0x1010, 0x10)
	w.note(0x1100, 0x10)
	w.note(0x2ff0, 0x20)      // two pages
	w.note(0x5000, 3*0x1000)  // three whole pages
	w.note(^uint64(0)-10, 20) // wraps: ignored
	w.note(0x9000, 0)
	pgs, spans, bytes := w.sorted()
	want := map[uint64]ramSpan{1: {0x10, 0x110}, 2: {0xff0, 0x1000}, 3: {0, 0x10}, 5: {0, 0x1000}, 6: {0, 0x1000}, 7: {0, 0x1000}}
	if len(pgs) != len(want) {
		t.Fatalf("pages %v, want %v", pgs, want)
	}
	var sum uint64
	for i, pg := range pgs {
		if i > 0 && pgs[i-1] >= pg {
			t.Errorf("pages not in order: %v", pgs)
		}
		if spans[pg] != want[pg] {
			t.Errorf("page %d: span %v, want %v", pg, spans[pg], want[pg])
		}
		sum += uint64(want[pg].hi - want[pg].lo)
	}
	if bytes != sum {
		t.Errorf("bytes %d, want %d", bytes, sum)
	}
}
