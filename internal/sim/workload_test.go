package sim

import (
	"context"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/guest"
)

const workloadSteps = 200

func newWorkload(t *testing.T, seed int64, check bool) *guest.Workload {
	t.Helper()
	w, err := guest.NewWorkload(seed, guest.WorkloadConfig{Check: check})
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func digest(t *testing.T, w *guest.Workload, d *guest.Driver) [32]byte {
	t.Helper()
	sum, err := w.Digest(d)
	if err != nil {
		t.Fatal(err)
	}
	return sum
}

// TestWorkloadChecked runs a seeded workload with its reference model on,
// polling and by interrupt.
func TestWorkloadChecked(t *testing.T) {
	p := newPool(t, 128<<20)
	for _, c := range []struct {
		name string
		sim  Options
		drv  guest.Options
	}{
		{"poll", Options{NoIRQ: true}, guest.Options{Seed: 10}},
		{"msi", Options{MSI: true}, guest.Options{Seed: 11, UseIRQ: true}},
		{"intx-small-ring", Options{}, guest.Options{Seed: 12, UseIRQ: true, RingSize: 4096}},
	} {
		t.Run(c.name, func(t *testing.T) {
			d := open(t, attach(t, serve(t, p, "w-"+c.name, 16<<20), c.sim), c.drv)
			w := newWorkload(t, 42, true)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			start := time.Now()
			if err := w.Run(ctx, d, workloadSteps); err != nil {
				t.Fatal(err)
			}
			t.Logf("%d steps in %s: %v", w.Steps(), time.Since(start).Round(time.Millisecond), w.OpCounts())
		})
	}
}

// TestConcurrentVGPUs runs workloads on two vGPUs of one pool at once, each
// checked against its model, then reruns one seed alone on a third vGPU
// (with another GTT permutation): the digests match, and differ across
// seeds.
func TestConcurrentVGPUs(t *testing.T) {
	p := newPool(t, 128<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type run struct {
		d   *guest.Driver
		w   *guest.Workload
		err error
	}
	runs := []*run{
		{d: open(t, attach(t, serve(t, p, "a", 16<<20), Options{}), guest.Options{Seed: 1, UseIRQ: true}), w: newWorkload(t, 100, true)},
		{d: open(t, attach(t, serve(t, p, "b", 16<<20), Options{MSI: true}), guest.Options{Seed: 2, UseIRQ: true}), w: newWorkload(t, 200, true)},
	}
	done := make(chan *run)
	for _, r := range runs {
		go func() {
			r.err = r.w.Run(ctx, r.d, workloadSteps)
			done <- r
		}()
	}
	for range runs {
		if r := <-done; r.err != nil {
			t.Fatal(r.err)
		}
	}
	da, db := digest(t, runs[0].w, runs[0].d), digest(t, runs[1].w, runs[1].d)
	if da == db {
		t.Fatal("different seeds, same digest")
	}
	d := open(t, attach(t, serve(t, p, "c", 16<<20), Options{NoIRQ: true}), guest.Options{Seed: 3})
	w := newWorkload(t, 100, false)
	if err := w.Run(ctx, d, workloadSteps); err != nil {
		t.Fatal(err)
	}
	if dc := digest(t, w, d); dc != da {
		t.Fatalf("seed 100 alone: digest %x, alongside another vGPU %x", dc, da)
	}
}

// TestReconnect closes the client mid-workload, attaches a new one to the
// same vGPU, continues, and compares the digest with an uninterrupted run.
func TestReconnect(t *testing.T) {
	p := newPool(t, 128<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	dev := serve(t, p, "r", 16<<20)
	b1, err := Attach(dev.path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := open(t, b1, guest.Options{Seed: 5, UseIRQ: true})
	w := newWorkload(t, 77, true)
	if err := w.Run(ctx, d, workloadSteps/2); err != nil {
		t.Fatal(err)
	}
	if err := b1.Close(); err != nil {
		t.Fatalf("closing the first client: %v", err)
	}
	b2 := attach(t, dev, Options{MSI: true})
	if err := d.Rebind(b2); err != nil {
		t.Fatal(err)
	}
	if err := w.Run(ctx, d, workloadSteps-workloadSteps/2); err != nil {
		t.Fatalf("after reconnecting: %v", err)
	}
	got := digest(t, w, d)

	u := open(t, attach(t, serve(t, p, "u", 16<<20), Options{}), guest.Options{Seed: 6})
	wu := newWorkload(t, 77, false)
	if err := wu.Run(ctx, u, workloadSteps); err != nil {
		t.Fatal(err)
	}
	if want := digest(t, wu, u); got != want {
		t.Fatalf("digest after a reconnect %x, uninterrupted %x", got, want)
	}
}

// TestReconnectMidStep stops the guest between two operations of a step —
// commands may still be in flight on the device — then moves the guest to a
// new client that keeps the guest's RAM (as a migration's destination QEMU
// would) and lets it continue. The digest must equal an uninterrupted run's.
func TestReconnectMidStep(t *testing.T) {
	p := newPool(t, 128<<20)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	dev := serve(t, p, "m", 16<<20)
	b1, err := Attach(dev.path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	d := open(t, b1, guest.Options{Seed: 5, UseIRQ: true})
	w := newWorkload(t, 78, false)
	ops, stopAt := 0, 37
	paused, resume := make(chan struct{}), make(chan struct{})
	w.SetGate(func(ctx context.Context) error {
		ops++
		if ops == stopAt {
			close(paused)
			select {
			case <-resume:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	})
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx, d, workloadSteps) }()
	select {
	case <-paused:
	case err := <-done:
		t.Fatalf("workload ended before the pause: %v", err)
	}
	// The guest's RAM outlives its first client, as QEMU's RAM outlives a
	// vfio-user reconnect; the server serves one client at a time, so the
	// first goes before the second comes.
	fd, err := unix.Dup(int(b1.RAMFile().Fd()))
	if err != nil {
		t.Fatal(err)
	}
	ram := os.NewFile(uintptr(fd), "guest-ram")
	defer ram.Close()
	if err := b1.Close(); err != nil {
		t.Fatalf("closing the first client: %v", err)
	}
	b2, err := Attach(dev.path, Options{RAM: ram})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b2.Close() })
	if err := d.Rebind(b2); err != nil {
		t.Fatal(err)
	}
	close(resume)
	if err := <-done; err != nil {
		t.Fatalf("after moving mid-step: %v", err)
	}
	got := digest(t, w, d)

	u := open(t, attach(t, serve(t, p, "u", 16<<20), Options{}), guest.Options{Seed: 6})
	wu := newWorkload(t, 78, false)
	if err := wu.Run(ctx, u, workloadSteps); err != nil {
		t.Fatal(err)
	}
	if want := digest(t, wu, u); got != want {
		t.Fatalf("digest after a mid-step move %x, uninterrupted %x", got, want)
	}
}
