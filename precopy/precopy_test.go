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
)

// configRecorder is a FrontEnd that records the writes it is given.
type configRecorder struct{ writes []apilog.Entry }

func (c *configRecorder) WriteConfig(off uint16, size uint8, v uint32) error {
	c.writes = append(c.writes, apilog.Entry{Kind: apilog.ConfigWrite, Offset: off, Size: size, Arg: v})
	return nil
}

// TestMigrateStrategies migrates a vGPU set up directly (no guest) with
// each strategy over a pipe and over loopback TCP into another pool at a
// different offset, with the VM writing between Precopy and Stop: the
// destination's memory and state equal the source's, the front end gets
// the guest's config writes, the remapped GTT sends the destination's
// engine writes into its own partition, and a kernel loaded before the
// migration launches after it while one unloaded before does not.
func TestMigrateStrategies(t *testing.T) {
	for _, tr := range []struct {
		name string
		pair func(*testing.T) (net.Conn, net.Conn)
	}{{"pipe", pipePair}, {"tcp", tcpPair}} {
		for _, strat := range Strategies {
			t.Run(string(strat)+"/"+tr.name, func(t *testing.T) {
				testMigrateStrategy(t, strat, tr.pair)
			})
		}
	}
}

func testMigrateStrategy(t *testing.T, strat Strategy, pair func(*testing.T) (net.Conn, net.Conn)) {
	const mem = 4 << 20
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pa, pb := newPool(t, 16<<20), newPool(t, 16<<20)
	_ = newVGPU(t, pa, "filler", 2<<20)
	_ = newVGPU(t, pb, "filler", 4<<20) // the destination lands at another offset
	src := newDev(t, pa, "src", mem, 1)
	src.fillMemory(2)

	a, b := pair(t)
	var fe configRecorder
	recv := receive(ctx, b, pb, "dst", &fe)
	s, err := NewSource(src.v, a, Options{Strategy: strat, Workers: 2, Log: testLog})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Precopy(ctx); err != nil {
		t.Fatal(err)
	}
	src.runWhileLive(3)
	rep, err := s.Stop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	r := <-recv
	if r.err != nil {
		t.Fatal(r.err)
	}
	dst := &dev{t: t, v: r.v, perm: src.perm, tail: src.tail}
	t.Cleanup(func() { dst.v.Close() })
	t.Logf("source report:\n%s", rep)

	if dst.v.Partition().Offset == src.v.Partition().Offset {
		t.Fatalf("destination at the source's pool offset %#x", src.v.Partition().Offset)
	}
	if !bytes.Equal(src.v.Memory(), dst.v.Memory()) {
		t.Fatal("destination memory differs from the source's")
	}
	want, err := src.v.Save()
	if err != nil {
		t.Fatal(err)
	}
	got, err := dst.v.Save()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("restored state differs:\n got %+v\nwant %+v", got.Engine, want.Engine)
	}
	_, srcConfig := splitLog(src.v.APILog().Compacted())
	if !reflect.DeepEqual(fe.writes, srcConfig) || len(fe.writes) == 0 {
		t.Fatalf("front end got %+v, source log has %+v", fe.writes, srcConfig)
	}
	if !reflect.DeepEqual(dst.v.APILog().Compacted(), src.v.APILog().Compacted()) {
		t.Fatalf("destination API log %+v, source %+v", dst.v.APILog().Compacted(), src.v.APILog().Compacted())
	}
	checkReport(t, strat, rep, int(mem/abi.PageSize))
	if r.rep.Stop.DirtyPages != rep.Stop.DirtyPages || r.rep.Precopy.Pages != rep.Precopy.Pages ||
		r.rep.APILog != rep.APILog || r.rep.Stop.Restore != rep.Stop.Restore {
		t.Errorf("destination report disagrees:\n%s", r.rep)
	}

	// The destination runs on its own partition.
	dst.v.Resume()
	before := append([]byte(nil), src.page(gFillAfter)...)
	dst.submit(guest_fill(gFillAfter, 0xabcdef01))
	if p := dst.page(gFillAfter); p[0] != 0x01 || p[3] != 0xab || p[abi.PageSize-1] != 0xab {
		t.Fatalf("FILL on the destination did not land in its partition: % x", p[:8])
	}
	if !bytes.Equal(src.page(gFillAfter), before) {
		t.Fatal("FILL on the destination changed the source's memory")
	}
	if dst.saxpy(hSaxpy) {
		t.Fatal("a kernel loaded before the migration does not launch after it")
	}
	if !dst.saxpy(hRender + 0x100) {
		t.Fatal("an unknown handle launched")
	}
	if !dst.saxpy(hRender) {
		t.Fatal("a kernel unloaded before the migration launched after it")
	}
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
	pa, pb := newPool(t, 8<<20), newPool(t, 8<<20)
	src := newDev(t, pa, "src", 1<<20, 1)
	a, b := pipePair(t)
	recv := receive(ctx, b, pb, "dst", nil)
	s, err := NewSource(src.v, a, Options{Strategy: Iterative, Log: testLog})
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
	} else {
		r.v.Close()
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
	src.submit(guest_fill(gFillAfter, 1)) // the source engine runs again
	if _, err := ParseStrategy("bogus"); err == nil {
		t.Fatal("ParseStrategy accepted bogus")
	}
	if _, err := NewSource(src.v, a, Options{MaxRounds: -1}); err == nil {
		t.Fatal("negative MaxRounds accepted")
	}
}

// TestReceiveRefusesGarbage sends something that is not a migration
// stream: Receive fails, frees its partition and tells the peer why.
func TestReceiveRefusesGarbage(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pb := newPool(t, 8<<20)
	a, b := tcpPair(t)
	recv := receive(ctx, b, pb, "dst", nil)
	if _, err := a.Write([]byte("GET / HTTP/1.0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	m, err := readVerdict(a)
	if err != nil || m.OK || !strings.Contains(m.Error, "magic") {
		t.Fatalf("verdict %+v, %v", m, err)
	}
	a.(*net.TCPConn).CloseWrite()
	r := <-recv
	if r.err == nil || r.v != nil {
		t.Fatalf("Receive = %v, %v", r.v, r.err)
	}
	if parts := pb.Partitions(); len(parts) != 0 {
		t.Fatalf("partitions left: %v", parts)
	}
}

// TestStripLoggedRefusesDisagreement: a log that does not describe the
// device fails the migration instead of losing state.
func TestStripLoggedRefusesDisagreement(t *testing.T) {
	p := newPool(t, 4<<20)
	d := newDev(t, p, "v", 1<<20, 1)
	d.fillMemory(1)
	d.v.Quiesce()
	defer d.v.Resume()
	st, err := d.v.Save()
	if err != nil {
		t.Fatal(err)
	}
	device, _ := splitLog(d.v.APILog().Compacted())
	good := st
	if err := stripLogged(&good, device); err != nil {
		t.Fatal(err)
	}
	if good.Engine.Kernels != nil || good.Engine.FenceDone != 0 || good.Regs.IntMask != 0 {
		t.Fatalf("stripped state still carries %+v", good.Engine)
	}
	for i, bad := range [][]apilog.Entry{
		device[1:],
		append(append([]apilog.Entry(nil), device...), apilog.Entry{Kind: apilog.Fence, Value: 99}),
		append(append([]apilog.Entry(nil), device...), apilog.Entry{Kind: apilog.KernelLoad, Handle: 77, Arg: 1}),
	} {
		s := st
		if err := stripLogged(&s, bad); err == nil || !strings.HasPrefix(err.Error(), "precopy: ") {
			t.Errorf("case %d: %v", i, err)
		}
	}
	if errors.Is(nil, ErrRefused) {
		t.Fatal("unreachable")
	}
}
