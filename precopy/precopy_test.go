package precopy

import (
	"bytes"
	"context"
	"errors"
	"net"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/internal/apilog"
	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/vgpu"
)

// TestMigrateStrategies migrates a vGPU set up directly (no guest) with
// each strategy over a pipe and over loopback TCP into a vGPU of another
// pool at a different offset, with the VM writing between Precopy and
// Stop: the destination's memory and state equal the source's, its API log
// hands back the guest's config writes (ConfigWrites, for the destination
// QEMU), the remapped GTT sends the destination's engine writes into its
// own partition, and a kernel loaded before the migration launches after
// it while one unloaded before does not.
func TestMigrateStrategies(t *testing.T) {
	for _, tr := range []struct {
		name string
		pair func(testing.TB) (net.Conn, net.Conn)
	}{{"pipe", migtest.PipePair}, {"tcp", migtest.TCPPair}} {
		for _, strat := range Strategies {
			t.Run(string(strat)+"/"+tr.name, func(t *testing.T) {
				testMigrateStrategy(t, strat, false, tr.pair)
			})
		}
		// The serial stop phase (scan everything, then send) too.
		t.Run("oneshot-serial/"+tr.name, func(t *testing.T) {
			testMigrateStrategy(t, OneShot, true, tr.pair)
		})
	}
}

func testMigrateStrategy(t *testing.T, strat Strategy, serial bool, pair func(testing.TB) (net.Conn, net.Conn)) {
	const mem = 4 << 20
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pa, pb := migtest.NewPool(t, 16<<20), migtest.NewPool(t, 16<<20)
	_ = migtest.NewVGPU(t, pa, "filler", 2<<20)
	_ = migtest.NewVGPU(t, pb, "filler", 4<<20) // the destination lands at another offset
	src := migtest.NewDev(t, pa, "src", mem, 1)
	src.FillMemory(2)
	dst := migtest.NewVGPU(t, pb, "dst", mem)
	if got := dst.ConfigWrites(); len(got) != 0 {
		t.Fatalf("a fresh destination vGPU already has config writes %+v", got)
	}

	a, b := pair(t)
	recv := receive(ctx, b, dst, Options{Log: migtest.Log})
	s, err := NewSource(src.V, a, Options{Strategy: strat, Workers: PipelineMinWorkers, SerialStop: serial, Log: migtest.Log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Precopy(ctx); err != nil {
		t.Fatal(err)
	}
	src.RunWhileLive(3)
	rep, err := s.Stop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := <-recv
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Logf("source report:\n%s", rep)

	if dst.Partition().Offset == src.V.Partition().Offset {
		t.Fatalf("destination at the source's pool offset %#x", src.V.Partition().Offset)
	}
	if !bytes.Equal(src.V.Memory(), dst.Memory()) {
		t.Fatal("destination memory differs from the source's")
	}
	want, err := src.V.Save()
	if err != nil {
		t.Fatal(err)
	}
	got, err := dst.Save() // also: Receive left it quiesced
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("restored state differs:\n got %+v\nwant %+v", got.Engine, want.Engine)
	}
	if cw := dst.ConfigWrites(); !reflect.DeepEqual(cw, migtest.ConfigWrites) || !reflect.DeepEqual(cw, src.V.ConfigWrites()) {
		t.Fatalf("destination hands back config writes %+v; the source guest wrote %+v (its log: %+v)",
			cw, migtest.ConfigWrites, src.V.ConfigWrites())
	}
	if !reflect.DeepEqual(dst.APILog().Compacted(), src.V.APILog().Compacted()) {
		t.Fatalf("destination API log %+v, source %+v", dst.APILog().Compacted(), src.V.APILog().Compacted())
	}
	checkReport(t, strat, rep, int(mem/abi.PageSize))
	if r.rep.Stop.DirtyPages != rep.Stop.DirtyPages || r.rep.Precopy.Pages != rep.Precopy.Pages ||
		r.rep.APILog != rep.APILog || r.rep.Stop.Restore != rep.Stop.Restore {
		t.Errorf("destination report disagrees:\n%s", r.rep)
	}

	// The destination runs on its own partition.
	dst.Resume()
	src.CheckRunsAfter(dst)
}

func checkReport(t *testing.T, strat Strategy, rep Report, pages int) {
	t.Helper()
	p, s := rep.Precopy, rep.Stop
	if rep.Strategy != strat || s.Total <= 0 || s.Transfer <= 0 || s.Restore <= 0 || s.Replay <= 0 {
		t.Errorf("report missing times: %+v", rep)
	}
	if s.Total < s.Quiesce+s.Scan+s.Transfer {
		t.Errorf("total %v shorter than its source-side parts", s.Total)
	}
	sum := 0
	for _, n := range s.BySource {
		sum += n
	}
	if sum != s.DirtyPages {
		t.Errorf("by source %v does not add up to %d", s.BySource, s.DirtyPages)
	}
	a := rep.APILog
	if a.RawEntries <= uint64(a.CompactedEntries) || a.CompactedEntries == 0 || a.RawBytes != a.RawEntries*apilog.EntrySize {
		t.Errorf("API log stats %+v", a)
	}
	if !strings.Contains(rep.String(), "api log") {
		t.Errorf("report text:\n%s", rep)
	}
	switch strat {
	case StopCopy:
		if p.Pages != 0 || s.DirtyPages != pages || s.BySource[dirty.Unrecorded] != pages {
			t.Errorf("stop-and-copy sent %d pages live and %d at the stop", p.Pages, s.DirtyPages)
		}
	default:
		// Dirty at the stop: the engine's FILL, the CPU-written page, the
		// zeroed page and the ring page the FILL command was written to;
		// the page written and restored is clean.
		if p.Pages != uint64(pages) || p.Rounds < 1 || s.DirtyPages < 4 || s.DirtyPages > 8 || s.BySource[dirty.Engine] < 1 {
			t.Errorf("%s: %d pages in %d rounds live, stop dirty %d by %v", strat, p.Pages, p.Rounds, s.DirtyPages, s.BySource)
		}
		if s.PagesHashed == 0 || rep.HashRate <= 0 {
			t.Errorf("final scan hashed %d pages at %v B/s", s.PagesHashed, rep.HashRate)
		}
	}
}

// TestSourceLifecycle checks the calls a Source refuses and that Rollback
// and Close are idempotent.
func TestSourceLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pa, pb := migtest.NewPool(t, 8<<20), migtest.NewPool(t, 8<<20)
	src := migtest.NewDev(t, pa, "src", 1<<20, 1)
	dst := migtest.NewVGPU(t, pb, "dst", 1<<20)
	a, b := migtest.PipePair(t)
	recv := receive(ctx, b, dst, Options{Log: migtest.Log})
	s, err := NewSource(src.V, a, Options{Strategy: Iterative, Log: migtest.Log})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Precopy(ctx); err != nil {
		t.Fatal(err)
	}
	if err := s.Precopy(ctx); err == nil {
		t.Fatal("a second Precopy was accepted")
	}
	if _, err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stop(ctx); err == nil {
		t.Fatal("a second Stop was accepted")
	}
	if r := <-recv; r.err != nil {
		t.Fatal(r.err)
	}
	// Rollback after a successful Stop (the switchover failed later)
	// resumes the source; again and after Close it does nothing.
	s.Rollback()
	s.Rollback()
	s.Close()
	s.Rollback()
	if _, err := s.Stop(ctx); err == nil {
		t.Fatal("Stop after Close was accepted")
	}
	src.Submit(migtest.Fill(migtest.GFillAfter, 1)) // the source engine runs again
	if _, err := ParseStrategy("bogus"); err == nil {
		t.Fatal("ParseStrategy accepted bogus")
	}
	if _, err := NewSource(src.V, a, Options{MaxRounds: -1}); err == nil {
		t.Fatal("negative MaxRounds accepted")
	}
}

// TestReceiveRefusesGarbage sends something that is not a migration
// stream: Receive fails and tells the peer why, and leaves its vGPU
// quiesced and untouched for the caller to discard, which empties the
// destination pool.
func TestReceiveRefusesGarbage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pb := migtest.NewPool(t, 8<<20)
	dst := migtest.NewVGPU(t, pb, "dst", 1<<20)
	a, b := migtest.TCPPair(t)
	recv := receive(ctx, b, dst, Options{Log: migtest.Log})
	if _, err := a.Write([]byte("GET / HTTP/1.0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	m, err := readVerdict(a)
	if err != nil || m.OK || !strings.Contains(m.Error, "magic") {
		t.Fatalf("verdict %+v, %v", m, err)
	}
	a.(*net.TCPConn).CloseWrite()
	if r := <-recv; r.err == nil || !strings.HasPrefix(r.err.Error(), "precopy: ") {
		t.Fatalf("Receive = %v", r.err)
	}
	checkDiscarded(t, dst, pb)
}

// checkDiscarded checks the caller's side of a refused migration: Receive
// left v quiesced, and closing it (the caller discards it) leaves p
// without partitions.
func checkDiscarded(t *testing.T, v *vgpu.VGPU, p *pool.Pool) {
	t.Helper()
	if !migtest.Quiesced(t, v) {
		t.Fatal("Receive failed and left the destination vGPU running")
	}
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if parts := p.Partitions(); len(parts) != 0 {
		t.Fatalf("the destination pool keeps partitions %v", parts)
	}
}

// TestStopRefusesLogMismatch: SaveMigrated moves what the API log carries
// out of the saved state, and an API log that does not describe the device
// fails the migration at the stop (vgpu.ErrLogMismatch) instead of losing
// state; the source rolls back and runs on, and the destination refuses.
func TestStopRefusesLogMismatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	newSource := func(t *testing.T) *migtest.Dev {
		d := migtest.NewDev(t, migtest.NewPool(t, 4<<20), "v", 1<<20, 1)
		d.FillMemory(1)
		return d
	}

	d := newSource(t)
	d.V.Quiesce()
	m, err := d.V.SaveMigrated()
	d.V.Resume()
	if err != nil {
		t.Fatal(err)
	}
	if st := m.State; st.Engine.Kernels != nil || st.Engine.FenceDone != 0 || st.Regs.IntMask != 0 {
		t.Fatalf("the saved state still carries what the log does: %+v, %+v", st.Engine, st.Regs)
	}
	if len(m.Device) == 0 || !reflect.DeepEqual(m.FrontEnd, migtest.ConfigWrites) {
		t.Fatalf("log split into device %+v and front end %+v", m.Device, m.FrontEnd)
	}
	device := m.Device

	for _, tc := range []struct {
		name string
		log  []apilog.Entry // replaces the device entries of the source's log
	}{
		{"an entry missing", device[1:]},
		{"another fence", append(append([]apilog.Entry(nil), device...), apilog.Entry{Kind: apilog.Fence, Value: 99})},
		{"an unknown kernel", append(append([]apilog.Entry(nil), device...), apilog.Entry{Kind: apilog.KernelLoad, Handle: 77, Arg: 1})},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := newSource(t)
			l := src.V.APILog()
			l.Reset()
			for _, e := range append(append([]apilog.Entry(nil), tc.log...), migtest.ConfigWrites...) {
				l.Record(e)
			}
			pb := migtest.NewPool(t, 4<<20)
			dst := migtest.NewVGPU(t, pb, "dst", 1<<20)
			a, b := migtest.TCPPair(t)
			recv := receive(ctx, b, dst, Options{Log: migtest.Log})
			s, err := NewSource(src.V, a, Options{Log: migtest.Log})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Precopy(ctx); err != nil {
				t.Fatal(err)
			}
			_, err = s.Stop(ctx)
			if !errors.Is(err, vgpu.ErrLogMismatch) || !strings.HasPrefix(err.Error(), "precopy: stop: ") {
				t.Fatalf("Stop with a log that disagrees: %v", err)
			}
			s.Rollback()
			if migtest.Quiesced(t, src.V) {
				t.Fatal("the source is still quiesced after Rollback")
			}
			src.Submit(migtest.Fill(migtest.GFillAfter, 0x01010101))
			if pg := src.Page(migtest.GFillAfter); pg[0] != 1 || pg[len(pg)-1] != 1 {
				t.Fatal("the source engine does not run after Rollback")
			}
			if r := <-recv; r.err == nil {
				t.Fatal("the destination accepted a migration the source failed")
			}
			checkDiscarded(t, dst, pb)
		})
	}
}
