package precopy

import (
	"bytes"
	"context"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/internal/migtest"
)

// TestRoundResendsDirtyPages: a round after the live phase finds what the
// VM wrote since and re-sends it, so the stop finds less; the destination
// ends equal to the source. Round is refused before Precopy and after
// Stop.
func TestRoundResendsDirtyPages(t *testing.T) {
	const mem = 1 << 20
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	pa, pb := migtest.NewPool(t, 4<<20), migtest.NewPool(t, 4<<20)
	src := migtest.NewDev(t, pa, "src", mem, 1)
	src.FillMemory(2)
	dst := migtest.NewVGPU(t, pb, "dst", mem)
	a, b := migtest.TCPPair(t)
	recv := receive(ctx, b, dst, Options{Log: migtest.Log})
	s, err := NewSource(src.V, a, Options{Log: migtest.Log})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.Round(ctx); err == nil {
		t.Error("Round before Precopy")
	}
	if err := s.Precopy(ctx); err != nil {
		t.Fatal(err)
	}
	src.RunWhileLive(3) // the guest CPU and the engine write a few pages
	r, err := s.Round(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if r.Dirty == 0 || r.Interval <= 0 || r.Bytes == 0 {
		t.Errorf("round %+v: found nothing the VM wrote", r)
	}
	again, err := s.Round(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if again.Dirty != 0 {
		t.Errorf("a second round on a quiet VM found %d dirty pages", again.Dirty)
	}
	rep, err := s.Stop(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Stop.DirtyPages != 0 || rep.Precopy.Rounds != 3 {
		t.Errorf("stop found %d dirty pages after the rounds re-sent them; %d rounds", rep.Stop.DirtyPages, rep.Precopy.Rounds)
	}
	if res := <-recv; res.err != nil {
		t.Fatal(res.err)
	}
	if !bytes.Equal(dst.Memory(), src.V.Memory()) {
		t.Error("the destination's memory differs from the source's")
	}
	if _, err := s.Round(ctx); err == nil {
		t.Error("Round after Stop")
	}
}
