package orchestrator

import (
	"context"
	"io"
	"net"
	"slices"
	"sync"
	"testing"
	"time"
)

// The vGPU stream stays under the migration's bandwidth limit.
func TestBandwidthLimitsTheVGPUStream(t *testing.T) {
	const limit = 20e6 // bytes/s: a 1 MiB vGPU takes about 50 ms under it
	e := newEnv(t, Timeouts{})
	e.start()
	s := e.source(Timeouts{})
	s.Control = NewControl(limit)
	rep, err := e.migrate(t, s)
	if err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	// A token bucket lets through at most its burst (full at the start)
	// and the rate's bytes since, and one chunk of a write in flight: the
	// bound each phase's bytes must keep, whatever their count (a stop
	// phase of a few hundred KiB is mostly burst, so a rate check alone
	// failed by chance).
	burst := max(limit*burstTime.Seconds(), minBurst)
	allowed := func(d time.Duration) float64 { return burst + limit*d.Seconds() + minBurst }
	p := rep.Precopy.Precopy
	t.Logf("vGPU live phase: %d bytes in %v: %.1f MB/s (limit %.0f MB/s; the bucket allows %.0f bytes)",
		p.Bytes, rep.VGPULive, float64(p.Bytes)/rep.VGPULive.Seconds()/1e6, limit/1e6, allowed(rep.VGPULive))
	if float64(p.Bytes) > allowed(rep.VGPULive) {
		t.Errorf("the vGPU stream moved %d bytes in %v, over the %.0f a %.0f MB/s bucket allows", p.Bytes, rep.VGPULive, allowed(rep.VGPULive), limit/1e6)
	}
	if float64(p.Bytes) < 2*burst {
		t.Errorf("the live phase moved %d bytes, under twice the bucket's %.0f: too few to show the rate", p.Bytes, burst)
	}
	st := rep.Precopy.Stop
	if st.Transfer > 0 && float64(st.Bytes) > allowed(st.Transfer) {
		t.Errorf("the stop phase moved %d bytes in %v, over the %.0f a %.0f MB/s bucket allows", st.Bytes, st.Transfer, allowed(st.Transfer), limit/1e6)
	}
}

// A rate changed mid-flight takes effect on a write already waiting.
func TestLimiterRateChangesMidFlight(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	l := NewLimiter(1e6) // 4 MB would take 4 s
	c := newLimitedConn(a, l)
	const total = 4_000_000
	read := make(chan int64, 1)
	go func() {
		n, _ := io.CopyN(io.Discard, b, total)
		read <- n
	}()
	first := make(chan struct{})
	go func() {
		// Raise the rate once the first bytes went through.
		<-first
		l.SetRate(1e9)
	}()
	start := time.Now()
	if _, err := c.Write(make([]byte, minBurst)); err != nil {
		t.Fatal(err)
	}
	close(first)
	if _, err := c.Write(make([]byte, total-minBurst)); err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	if n := <-read; n != total {
		t.Fatalf("read %d of %d bytes", n, total)
	}
	t.Logf("4 MB in %v after the rate went from 1 MB/s to 1 GB/s", took)
	if took > 2*time.Second {
		t.Errorf("4 MB took %v: the new rate did not reach the waiting write", took)
	}
	if l.Rate() != 1e9 {
		t.Errorf("rate %d", l.Rate())
	}
}

// A write waiting for tokens ends at its write deadline, as precopy
// interrupts a blocked write.
func TestLimitedConnHonoursWriteDeadline(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	go func() { _, _ = io.Copy(io.Discard, b) }()
	c := newLimitedConn(a, NewLimiter(1e3)) // 1 MB would take 1000 s
	done := make(chan error, 1)
	go func() {
		_, err := c.Write(make([]byte, 1e6))
		done <- err
	}()
	_ = c.SetWriteDeadline(time.Now())
	select {
	case err := <-done:
		if err == nil {
			t.Error("the write went through")
		}
	case <-time.After(guard):
		t.Fatal("a write waiting for tokens ignored its deadline")
	}
}

func TestVMMShare(t *testing.T) {
	for _, c := range []struct {
		limit uint64
		vgpu  float64
		want  uint64
	}{
		{0, 5e6, 0},         // no limit: the VMM's own
		{100e6, 0, 100e6},   // the vGPU idle: all of it
		{100e6, 40e6, 60e6}, // the rest
		{100e6, 99e6, 6.25e6},
		{100e6, 200e6, 6.25e6}, // never below limit/vmmShareFloor
	} {
		if got := vmmShare(c.limit, c.vgpu); got != c.want {
			t.Errorf("vmmShare(%d, %.0f) = %d, want %d", c.limit, c.vgpu, got, c.want)
		}
	}
}

// bwVM is a source VM whose VMM takes a bandwidth (BandwidthSetter).
type bwVM struct {
	*fakeSourceVM
	mu   sync.Mutex
	sets []uint64
	seen chan uint64
}

func (vm *bwVM) SetMaxBandwidth(_ context.Context, bps uint64) error {
	vm.mu.Lock()
	vm.sets = append(vm.sets, bps)
	vm.mu.Unlock()
	select {
	case vm.seen <- bps:
	default:
	}
	return nil
}

// While the VMM migrates it gets the limit's share, again at once when
// the limit changes.
func TestBandwidthVMMShareFollowsTheLimit(t *testing.T) {
	e := newEnv(t, Timeouts{})
	e.start()
	ctl := NewControl(100e6)
	vm := &bwVM{fakeSourceVM: e.vm, seen: make(chan uint64, 16)}
	e.vm.precopy = func(ctx context.Context) error {
		// The VMM's RAM pre-copy: the limit changes while it runs.
		waitShare(t, vm, 100e6)
		ctl.SetBandwidth(30e6)
		waitShare(t, vm, 30e6)
		return nil
	}
	s := e.source(Timeouts{})
	s.VM, s.Control = vm, ctl
	if _, err := e.migrate(t, s); err != nil {
		t.Fatalf("Migrate: %v", err)
	}
	vm.mu.Lock()
	defer vm.mu.Unlock()
	if !slices.Contains(vm.sets, 100e6) || !slices.Contains(vm.sets, 30e6) {
		t.Errorf("the VMM was given %v", vm.sets)
	}
}

func waitShare(t *testing.T, vm *bwVM, want uint64) {
	t.Helper()
	timeout := time.After(guard)
	for {
		select {
		case got := <-vm.seen:
			if got == want {
				return
			}
		case <-timeout:
			t.Errorf("the VMM was never given %d", want)
			return
		}
	}
}
