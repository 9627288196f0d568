package precopy

import (
	"bytes"
	"context"
	"io"
	"reflect"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/vgpu"
)

// oneWay is a connection that only writes, for NoVerdict.
type oneWay struct{ io.Writer }

func (oneWay) Read([]byte) (int, error) { return 0, io.EOF }

// TestNoVerdict migrates in the verdict-less mode over a one-way pipe into
// an existing vGPU: Stop completes without a verdict, so its report lacks
// the destination's times. Receive also answers a verdict over TCP, hands
// back the guest's config writes either way, refuses a verdict on a
// connection that cannot carry one, and refuses a stream for another
// memory size, leaving its vGPU quiesced for the caller to discard.
func TestNoVerdict(t *testing.T) {
	const mem = 2 << 20
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pa, pb := migtest.NewPool(t, 4*mem), migtest.NewPool(t, 8*mem)
	_ = migtest.NewVGPU(t, pb, "filler", 1<<20)
	src := migtest.NewDev(t, pa, "src", mem, 1)
	src.FillMemory(2)
	migrate := func(t *testing.T, conn io.ReadWriter, opts Options) Report {
		t.Helper()
		s, err := NewSource(src.V, conn, opts)
		if err != nil {
			t.Fatal(err)
		}
		defer src.V.Resume() // the next subtest migrates it again
		defer s.Close()
		if err := s.Precopy(ctx); err != nil {
			t.Fatal(err)
		}
		src.RunWhileLive(3)
		rep, err := s.Stop(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	same := func(t *testing.T, dv *vgpu.VGPU) {
		t.Helper()
		src.V.Quiesce()
		defer src.V.Resume()
		if !bytes.Equal(src.V.Memory(), dv.Memory()) {
			t.Fatal("destination memory differs from the source's")
		}
		want, _ := src.V.Save()
		got, err := dv.Save()
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("destination state differs (%v)", err)
		}
		if cw := dv.ConfigWrites(); !reflect.DeepEqual(cw, migtest.ConfigWrites) {
			t.Fatalf("destination hands back config writes %+v, the source guest wrote %+v", cw, migtest.ConfigWrites)
		}
		dv.Resume()
		src.CheckRunsAfter(dv)
	}

	t.Run("one-way pipe", func(t *testing.T) {
		dv := migtest.NewVGPU(t, pb, "dst1", mem)
		r, w := io.Pipe()
		recv := receive(ctx, r, dv, Options{NoVerdict: true, Log: migtest.Log})
		rep := migrate(t, oneWay{w}, Options{NoVerdict: true, Workers: 2, Log: migtest.Log})
		w.Close()
		got := <-recv
		if got.err != nil {
			t.Fatal(got.err)
		}
		if rep.Stop.Total <= 0 || rep.Stop.Restore != 0 || got.rep.Stop.Restore <= 0 {
			t.Fatalf("source's restore %v (no verdict: want 0), destination's %v", rep.Stop.Restore, got.rep.Stop.Restore)
		}
		same(t, dv)
	})
	t.Run("verdict over TCP", func(t *testing.T) {
		dv := migtest.NewVGPU(t, pb, "dst2", mem)
		a, b := migtest.TCPPair(t)
		recv := receive(ctx, b, dv, Options{Log: migtest.Log})
		rep := migrate(t, a, Options{Workers: 2, Log: migtest.Log})
		got := <-recv
		if got.err != nil {
			t.Fatal(got.err)
		}
		if rep.Stop.Restore != got.rep.Stop.Restore || rep.Stop.Restore <= 0 {
			t.Fatalf("source's restore %v, destination's %v", rep.Stop.Restore, got.rep.Stop.Restore)
		}
		same(t, dv)
	})
	t.Run("verdict needs a writer", func(t *testing.T) {
		dv := migtest.NewVGPU(t, pb, "dst3", mem)
		if _, err := Receive(ctx, bytes.NewReader(nil), dv, Options{Log: migtest.Log}); err == nil {
			t.Fatal("Receive accepted a verdict on a reader")
		}
	})
	t.Run("other memory size", func(t *testing.T) {
		p := migtest.NewPool(t, mem)
		dv := migtest.NewVGPU(t, p, "dst4", mem/2)
		r, w := io.Pipe()
		recv := receive(ctx, r, dv, Options{NoVerdict: true, Log: migtest.Log})
		s, err := NewSource(src.V, oneWay{w}, Options{NoVerdict: true, Log: migtest.Log})
		if err != nil {
			t.Fatal(err)
		}
		got := <-recv
		if got.err == nil {
			t.Fatal("a stream for another memory size was received")
		}
		r.CloseWithError(got.err) // what precopy/native does: the source's writes fail
		if err := s.Precopy(ctx); err == nil {
			t.Fatal("pre-copy into a refusing destination succeeded")
		}
		s.Rollback()
		checkDiscarded(t, dv, p)
	})
}
