package sim

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/guest"
)

// TestHostileProgram runs the hostile guest program (guest.Hostile), one
// attack at a time and then all of them in turn, on a vGPU that shares its
// pool with a victim running the seeded workload: every attempt is
// refused or contained, the hostile's vGPU keeps serving it, and the
// victim's digest equals the same seed's run beside an idle neighbour.
func TestHostileProgram(t *testing.T) {
	const (
		seed  = 77
		steps = workloadSteps / 4
	)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	alone := victimRun(ctx, t, serve(t, newPool(t, 32<<20), "alone", 8<<20), seed)
	if err := alone.Run(ctx, steps); err != nil {
		t.Fatal(err)
	}
	want := vmDigest(t, alone)

	p := newPool(t, 32<<20)
	a := serve(t, p, "hostile", 4<<20)
	victim := victimRun(ctx, t, serve(t, p, "victim", 8<<20), seed)
	hvm, err := StartVM(a.path, 5, guest.WorkloadConfig{}, Options{MSI: true})
	if err != nil {
		t.Fatal(err)
	}
	defer hvm.Close()
	d := hvm.d
	for _, at := range guest.Attacks {
		h, err := guest.NewHostile(d, guest.HostileConfig{Seed: 1, Attacks: []guest.Attack{at}})
		if err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if err := h.Step(ctx); err != nil {
				t.Errorf("%s: %v", at, err)
			}
		}
		st := h.Stats()
		if st.Refused == 0 || st.Failures != 0 {
			t.Errorf("%s: %+v", at, st)
		}
		for _, ga := range []uint64{h.Scratch(), h.Sentinel(), h.Spare()} {
			if err := d.Free(ga); err != nil {
				t.Fatal(err)
			}
		}
	}
	done := make(chan error, 1)
	var hostile *guest.Hostile
	started := make(chan struct{})
	hctx, stop := context.WithCancel(ctx)
	go func() {
		done <- hvm.RunHostile(hctx, guest.HostileConfig{Seed: 2}, time.Hour, func(h *guest.Hostile) { hostile = h; close(started) })
	}()
	<-started
	if err := victim.Run(ctx, steps); err != nil {
		t.Fatalf("victim beside the hostile program: %v", err)
	}
	// The victim's steps may end before the hostile program has begun
	// every attack (a loaded machine): it goes on until it has.
	if err := hostile.WaitSteps(ctx, uint64(len(guest.Attacks))); err != nil {
		t.Fatal(err)
	}
	stop()
	if err := <-done; err != nil {
		t.Errorf("hostile program: %v", err)
	}
	if got := vmDigest(t, victim); got != want {
		t.Errorf("victim digest %x beside the hostile program, %x alone", got[:8], want[:8])
	}
	st := hostile.Stats()
	t.Logf("hostile program beside the victim: %d attacks %v, %d attempts, %d refused, %d resets, %d storms of %d commands",
		st.Steps, st.ByAttack, st.Attempts, st.Refused, st.Resets, st.Storms, st.Commands)
	if st.Failures != 0 || st.Steps < uint64(len(guest.Attacks)) {
		t.Errorf("hostile stats %+v", st)
	}
}

// TestHostileProgramCancelled runs each attack with its context ended and
// the vGPU's engine held (as at a migration's pause), as the end of a
// hostile run meets an attack in the middle of a wait: the attack stops
// with the context's error and never counts the device's unfinished work
// as an attempt it failed to contain.
func TestHostileProgramCancelled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	ended, end := context.WithCancel(ctx)
	end()
	for _, at := range guest.Attacks {
		dev := serve(t, newPool(t, 8<<20), "hostile", 4<<20)
		vm, err := StartVM(dev.path, 5, guest.WorkloadConfig{}, Options{MSI: true})
		if err != nil {
			t.Fatal(err)
		}
		h, err := guest.NewHostile(vm.d, guest.HostileConfig{Seed: 1, Attacks: []guest.Attack{at}})
		if err != nil {
			t.Fatal(err)
		}
		dev.v.Quiesce()
		err = h.Step(ended)
		dev.v.Resume()
		if errors.Is(err, guest.ErrNotContained) {
			t.Errorf("%s with its context ended: %v", at, err)
		}
		if st := h.Stats(); st.Failures != 0 {
			t.Errorf("%s with its context ended: %+v", at, st)
		}
		vm.Close()
	}
}
