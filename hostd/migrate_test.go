package hostd

import (
	"context"
	"errors"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/internal/vgpu"
	"github.com/gmig-dev/gmig/precopy"
)

// migHost is one gmigd with its migration listener.
type migHost struct {
	*Host
	addr     string
	incoming chan Info
}

func newMigHost(t *testing.T, ctx context.Context, filler bool) *migHost {
	t.Helper()
	return newMigHostWith(t, ctx, filler, Config{})
}

func newMigHostWith(t *testing.T, ctx context.Context, filler bool, cfg Config) *migHost {
	t.Helper()
	h := newHostWith(t, cfg)
	if filler {
		// Another tenant first, so vGPUs land at different pool offsets here
		// and on the other host.
		if _, err := h.Create(vgpu.Config{Name: "filler", MemSize: 4 << 20}); err != nil {
			t.Fatal(err)
		}
	}
	l, err := h.ListenMigrations("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	m := &migHost{Host: h, addr: l.Addr().String(), incoming: make(chan Info, 1)}
	go func() {
		_ = h.ServeMigrations(ctx, l, nil, func(info Info, _ precopy.Report) { m.incoming <- info })
	}()
	return m
}

var testWorkload = guest.WorkloadConfig{MemSize: 2 << 20}

// heartbeatLog records guest heartbeats from several hosts.
type heartbeatLog struct {
	mu    sync.Mutex
	beats []beat
}

type beat struct {
	host, vgpu string
	value      uint64
	at         time.Time
}

// recorder returns an OnHeartbeat hook for the host called host.
func (l *heartbeatLog) recorder(host string) func(string, uint64, time.Time) {
	return func(vgpu string, v uint64, at time.Time) {
		l.mu.Lock()
		defer l.mu.Unlock()
		l.beats = append(l.beats, beat{host, vgpu, v, at})
	}
}

// summary counts vgpu's heartbeats and the hosts that saw them, finds the
// largest host-clock gap between consecutive values (the guest-observed
// pause), and says whether values arrived in increasing order.
func (l *heartbeatLog) summary(vgpu string) (n, hosts int, gap time.Duration, ordered bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	seen := map[string]bool{}
	ordered = true
	var prev *beat
	for i := range l.beats {
		b := &l.beats[i]
		if b.vgpu != vgpu {
			continue
		}
		n++
		seen[b.host] = true
		if prev != nil {
			if b.value <= prev.value {
				ordered = false
			}
			if b.value == prev.value+1 {
				gap = max(gap, b.at.Sub(prev.at))
			}
		}
		prev = b
	}
	return n, len(seen), gap, ordered
}

const (
	testSeed  = 11
	testSteps = 240
)

// TestMigrateBetweenHosts migrates a vGPU between two gmigd over loopback
// TCP, back and forth, while the simulated guest runs a seeded workload;
// each strategy is used; the guest ends with the same graphics-memory
// digest as a run that was never migrated.
func TestMigrateBetweenHosts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var beats heartbeatLog
	hosts := []*migHost{
		newMigHostWith(t, ctx, true, Config{OnHeartbeat: beats.recorder("a")}),
		newMigHostWith(t, ctx, false, Config{OnHeartbeat: beats.recorder("b")}),
	}

	info, err := hosts[0].Create(vgpu.Config{Name: "g", MemSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	vm, err := sim.StartVM(info.Socket, testSeed, testWorkload, sim.Options{MSI: true})
	if err != nil {
		t.Fatal(err)
	}
	stopBeat := vm.StartHeartbeat(time.Millisecond)
	done := make(chan error, 1)
	go func() { done <- vm.Run(ctx, testSteps) }()

	offsets := map[uint64]bool{info.PoolOffset: true}
	strategies := []precopy.Strategy{precopy.OneShot, precopy.Iterative, precopy.StopCopy, precopy.OneShot}
	for i, st := range strategies {
		from, to := hosts[i%2], hosts[(i+1)%2]
		rep, err := from.Migrate(ctx, "g", to.addr, MigrateOptions{
			Precopy: precopy.Options{Strategy: st},
			Pause:   vm.Pause,
			Resume:  vm.Resume,
		})
		if err != nil {
			t.Fatalf("migration %d (%s): %v", i, st, err)
		}
		arrived := <-to.incoming
		offsets[arrived.PoolOffset] = true
		if _, err := from.Get("g"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("migration %d: the source still has the vGPU (%v)", i, err)
		}
		if err := vm.Move(arrived.Socket); err != nil {
			t.Fatal(err)
		}
		v, err := to.VGPU("g")
		if err != nil {
			t.Fatal(err)
		}
		v.Resume()
		vm.Resume()
		t.Logf("migration %d (%s): stop %.2f ms, %d dirty pages, pool offset %#x", i, st,
			float64(rep.Stop.Total)/float64(time.Millisecond), rep.Stop.DirtyPages, arrived.PoolOffset)
	}
	if err := <-done; err != nil {
		t.Fatalf("workload: %v", err)
	}
	stopBeat()
	got, err := vm.Digest()
	if err != nil {
		t.Fatal(err)
	}
	vm.Close()
	// The guest's heartbeat went on across the moves, seen by both hosts'
	// clocks, in order.
	n, hostsSeen, gap, ordered := beats.summary("g")
	if n == 0 || hostsSeen != 2 || !ordered {
		t.Fatalf("heartbeats: %d seen, from %d hosts, in order %v", n, hostsSeen, ordered)
	}
	t.Logf("%d heartbeats; largest gap (guest-observed pause, host clock) %s", n, gap.Round(time.Microsecond))
	if len(offsets) < 2 {
		t.Fatalf("the vGPU never changed pool offset: %v", offsets)
	}

	// Reference: the same seed on a vGPU that never moves.
	ref, err := hosts[1].Create(vgpu.Config{Name: "ref", MemSize: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	rvm, err := sim.StartVM(ref.Socket, testSeed, testWorkload, sim.Options{MSI: true})
	if err != nil {
		t.Fatal(err)
	}
	defer rvm.Close()
	if err := rvm.Run(ctx, testSteps); err != nil {
		t.Fatal(err)
	}
	want, err := rvm.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("digest after 4 migrations %x, never migrated %x", got, want)
	}
}

// TestMigrateFailureKeepsSource: a peer that is not there, and one that
// hangs up mid-stream, leave the vGPU running on its host with the guest
// going on; a later migration still works.
func TestMigrateFailureKeepsSource(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	src := newMigHost(t, ctx, false)
	info, err := src.Create(vgpu.Config{Name: "g", MemSize: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	vm, err := sim.StartVM(info.Socket, testSeed, testWorkload, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	done := make(chan error, 1)
	go func() { done <- vm.Run(ctx, testSteps) }()

	// Nobody listens on a closed listener's port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := l.Addr().String()
	l.Close()
	opts := MigrateOptions{Pause: vm.Pause, Resume: vm.Resume}
	if _, err := src.Migrate(ctx, "g", gone, opts); err == nil {
		t.Fatal("migrating to nobody succeeded")
	}
	// A peer that accepts, reads a little and hangs up.
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hang.Close()
	go func() {
		c, err := hang.Accept()
		if err == nil {
			buf := make([]byte, 64<<10)
			_, _ = c.Read(buf)
			c.Close()
		}
	}()
	if _, err := src.Migrate(ctx, "g", hang.Addr().String(), opts); err == nil {
		t.Fatal("migrating to a peer that hung up succeeded")
	}
	if _, err := src.Get("g"); err != nil {
		t.Fatalf("the vGPU is gone after failed migrations: %v", err)
	}
	// The guest goes on and the device still works: a real migration now.
	dst := newMigHost(t, ctx, true)
	if _, err := src.Migrate(ctx, "g", dst.addr, opts); err != nil {
		t.Fatal(err)
	}
	arrived := <-dst.incoming
	if err := vm.Move(arrived.Socket); err != nil {
		t.Fatal(err)
	}
	v, err := dst.VGPU("g")
	if err != nil {
		t.Fatal(err)
	}
	v.Resume()
	vm.Resume()
	if err := <-done; err != nil {
		t.Fatalf("workload: %v", err)
	}
	// A destination that already has a vGPU of that name refuses before its
	// verdict, so the source keeps the vGPU and the guest goes on.
	back := newMigHost(t, ctx, false)
	if _, err := back.Create(vgpu.Config{Name: "g", MemSize: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	if _, err := dst.Migrate(ctx, "g", back.addr, opts); err == nil || !errors.Is(err, precopy.ErrRefused) {
		t.Fatalf("migrating onto a name in use: %v, want a refusal", err)
	}
	if _, err := dst.Get("g"); err != nil {
		t.Fatalf("the refused vGPU left its host: %v", err)
	}
	if got := len(back.Pool().Partitions()); got != 1 {
		t.Fatalf("the refusing host kept %d partitions, want its own 1", got)
	}
	if _, err := src.Migrate(ctx, "nope", dst.addr, opts); !errors.Is(err, ErrNotFound) {
		t.Fatalf("migrating an unknown vGPU: %v", err)
	}
}
