package precopy

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/internal/guestwrites"
	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/vgpu"
)

// selfWrites is Options.GuestWrites for a guest that writes the vGPU's
// memory from this process through a mapping of its own (guestMapping
// here, the in-process simulator's in gmigd): this process's mappings of
// the memfd, of which the source leaves the pool's own out.
func selfWrites(aperture *os.File) (WriteLog, string) {
	l, c := guestwrites.Open(0, aperture, migtest.Log)
	return l, c.String()
}

// guestMapping maps v's aperture as a guest's VMM would: a shared
// mapping of the memfd of its own, beside the pool's.
func guestMapping(t *testing.T, v *vgpu.VGPU) []byte {
	t.Helper()
	ri, err := v.RegionInfo(abi.BARAperture)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(int(ri.File.Fd()), 0, int(ri.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	return mem
}

// guestStores writes mem, a vGPU's memory, the ways a guest CPU can
// between Precopy and Stop: one-byte stores at random offsets of random
// pages, a store that puts the old byte back (A→B→A), a page's first and
// last byte. It returns how many distinct pages it stored to.
func guestStores(mem []byte, r *rand.Rand) int {
	pages := len(mem) / abi.PageSize
	touched := map[int]bool{}
	store := func(off int, b byte) {
		mem[off] = b
		touched[off/abi.PageSize] = true
	}
	for range 40 {
		off := r.IntN(len(mem))
		store(off, mem[off]^byte(1+r.IntN(255)))
	}
	aba := r.IntN(len(mem))
	old := mem[aba]
	store(aba, ^old)
	store(aba, old)
	store(0, ^mem[0])
	store(pages*abi.PageSize-1, ^mem[pages*abi.PageSize-1])
	return len(touched)
}

// TestGuestWritesLogged: with this process's uffd-wp log of the vGPU's
// memory, each live strategy (and the serial stop phase) hashes at the
// stop only the pages the guest stored to and the engine's marks, the
// full hash finds no page the log missed (VerifyWriteLog), the report
// names the mechanism and logs one mapping of the two (the guest's; the
// pool's is the engine's, whose writes are marked), and the
// destination's memory equals the source's.
func TestGuestWritesLogged(t *testing.T) {
	for _, c := range []struct {
		name   string
		strat  Strategy
		serial bool
	}{{"oneshot", OneShot, false}, {"oneshot-serial", OneShot, true}, {"iterative", Iterative, false}} {
		t.Run(c.name, func(t *testing.T) {
			const mem = 4 << 20
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			pa, pb := migtest.NewPool(t, 8<<20), migtest.NewPool(t, 8<<20)
			src := migtest.NewDev(t, pa, "src", mem, 1)
			src.Guest = guestMapping(t, src.V)
			src.FillMemory(2)
			dst := migtest.NewVGPU(t, pb, "dst", mem)
			a, b := migtest.PipePair(t)
			recv := receive(ctx, b, dst, Options{Log: migtest.Log})
			s, err := NewSource(src.V, a, Options{
				Strategy: c.strat, Workers: PipelineMinWorkers, SerialStop: c.serial, Log: migtest.Log,
				GuestWrites: selfWrites, VerifyWriteLog: true,
			})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if err := s.Precopy(ctx); err != nil {
				t.Fatal(err)
			}
			src.RunWhileLive(3) // the engine's writes: exact marks
			stored := guestStores(src.Guest, rand.New(rand.NewPCG(4, 5)))
			rep, err := s.Stop(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if r := <-recv; r.err != nil {
				t.Fatal(r.err)
			}
			if !bytes.Equal(src.V.Memory(), dst.Memory()) {
				t.Fatal("destination memory differs from the source's")
			}
			w := rep.Stop.WriteLog
			if !strings.HasPrefix(rep.Tracking, "uffd-wp (this process") || !w.Active || !rep.Stop.WriteLogVerified {
				t.Fatalf("tracking %q, write log %+v, verified %v; want uffd-wp, active, verified", rep.Tracking, w, rep.Stop.WriteLogVerified)
			}
			// Every hashed page is one the log reported (the engine's
			// marks need no hash); it reported each page the test stored
			// to, and few more (the harness's command ring, written by
			// the CPU too).
			if rep.Stop.PagesHashed > w.Written || w.Written < stored || w.Written > stored+16 {
				t.Fatalf("%d pages hashed, %d logged as written, %d stored to, by source %v: the log should decide", rep.Stop.PagesHashed, w.Written, stored, rep.Stop.BySource)
			}
			if want := "this process, 2 mapping(s)); 1 of them gmigd's own, not logged"; !strings.Contains(rep.Tracking, want) {
				t.Errorf("tracking %q does not say %q", rep.Tracking, want)
			}
			if !strings.Contains(rep.String(), "tracking   uffd-wp") {
				t.Errorf("report text lacks the tracking line:\n%s", rep)
			}
		})
	}
}

// blindLog is a write log that never reports a write.
type blindLog struct{}

func (blindLog) Arm() error                       { return nil }
func (blindLog) Written(dst []int) ([]int, error) { return dst, nil }
func (blindLog) Close() error                     { return nil }

// TestVerifyWriteLogCatchesMiss: a log that misses the guest's stores
// fails the stop phase under VerifyWriteLog instead of leaving the
// destination stale.
func TestVerifyWriteLogCatchesMiss(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pa, pb := migtest.NewPool(t, 4<<20), migtest.NewPool(t, 4<<20)
	src := migtest.NewDev(t, pa, "src", 1<<20, 1)
	src.FillMemory(2)
	dst := migtest.NewVGPU(t, pb, "dst", 1<<20)
	a, b := migtest.PipePair(t)
	recv := receive(ctx, b, dst, Options{Log: migtest.Log})
	s, err := NewSource(src.V, a, Options{
		Log: migtest.Log, VerifyWriteLog: true,
		GuestWrites: func(*os.File) (WriteLog, string) { return blindLog{}, "blind" },
	})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Precopy(ctx); err != nil {
		t.Fatal(err)
	}
	guestStores(src.V.Memory(), rand.New(rand.NewPCG(1, 2)))
	if _, err := s.Stop(ctx); !errors.Is(err, ErrWriteLogMissed) {
		t.Fatalf("Stop with a blind write log = %v, want ErrWriteLogMissed", err)
	}
	s.Rollback()
	a.Close()
	<-recv
}

// TestNoWriteLogSource: without GuestWrites the report says the full hash
// covers the stop; stop-and-copy opens no log at all.
func TestNoWriteLogSource(t *testing.T) {
	pa := migtest.NewPool(t, 2<<20)
	v := migtest.NewVGPU(t, pa, "v", 1<<20)
	for _, c := range []struct {
		strat  Strategy
		writes func(*os.File) (WriteLog, string)
		want   string
	}{
		{OneShot, nil, trackingNoSource},
		{StopCopy, func(*os.File) (WriteLog, string) { t.Error("GuestWrites called for stop-and-copy"); return nil, "" }, trackingStopCopy},
	} {
		s, err := NewSource(v, &bytes.Buffer{}, Options{Strategy: c.strat, NoVerdict: true, Log: migtest.Log, GuestWrites: c.writes})
		if err != nil {
			t.Fatal(err)
		}
		if s.report.Tracking != c.want {
			t.Errorf("%s: tracking %q, want %q", c.strat, s.report.Tracking, c.want)
		}
		s.Close()
	}
}
