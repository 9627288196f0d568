package hostd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/precopy"
	"github.com/gmig-dev/gmig/vgpu"
)

// migHost is one gmigd with its migration listener.
type migHost struct {
	*Host
	addr     string
	arrivals chan orchestrator.Arrival
}

func newMigHost(t *testing.T, ctx context.Context, sims *sim.Registry, filler bool) *migHost {
	t.Helper()
	return newMigHostWith(t, ctx, filler, Config{Sims: sims})
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
	m := &migHost{Host: h, addr: l.Addr().String(), arrivals: make(chan orchestrator.Arrival, 8)}
	done := make(chan struct{})
	sctx, stop := context.WithCancel(ctx)
	go func() {
		defer close(done)
		_ = h.ServeMigrations(sctx, l, func(a orchestrator.Arrival) { m.arrivals <- a })
	}()
	t.Cleanup(func() { stop(); <-done })
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

// summary counts vgpu's heartbeats and the hosts that saw them, and says
// whether values arrived in increasing order.
func (l *heartbeatLog) summary(vgpu string) (n, hosts int, ordered bool) {
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
		if prev != nil && b.value <= prev.value {
			ordered = false
		}
		prev = b
	}
	return n, len(seen), ordered
}

const (
	testSeed  = 11
	testSteps = 240
)

// startSimVM starts a simulated VM on a new vGPU of h, registers it as VM
// "vm" there and in sims, with a 1 ms heartbeat, and runs its workload.
// The test's cleanup stops the workload, waits for it to return and only
// then closes the VM (a VM closed under its running workload pulls the
// aperture from under the guest driver), so callers need not close it.
func startSimVM(t *testing.T, ctx context.Context, h *migHost, sims *sim.Registry, mem uint64) (vm *sim.VM, info Info, done <-chan error) {
	t.Helper()
	info, err := h.Create(vgpu.Config{Name: "vm", MemSize: mem})
	if err != nil {
		t.Fatal(err)
	}
	vm, err = sim.StartVM(info.Socket, testSeed, testWorkload, sim.Options{MSI: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.AddSimVM("vm", "vm", vm, nil); err != nil {
		t.Fatal(err)
	}
	sims.Put("vm", vm)
	stopBeat := vm.StartHeartbeat(time.Millisecond)
	t.Cleanup(stopBeat)
	runCtx, stop := context.WithCancel(ctx)
	ch := make(chan error, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		ch <- vm.Run(runCtx, testSteps)
	}()
	t.Cleanup(func() {
		stop()
		<-finished
		vm.Close()
	})
	return vm, info, ch
}

// midWorkload lets the workload run to step and wait there (the VM runs
// on), and returns a Progress hook that lets it run 40 steps further once
// the vGPU's live phase starts: the migration then happens in the middle of
// the workload, however fast the machine, and pre-copies under it.
func midWorkload(t *testing.T, ctx context.Context, vm *sim.VM, step uint64) func(orchestrator.Progress) {
	t.Helper()
	select {
	case <-vm.Pace(step):
	case <-ctx.Done():
		t.Fatal(ctx.Err())
	}
	var once sync.Once
	return func(p orchestrator.Progress) {
		if p.Phase == orchestrator.PhaseVGPULive {
			once.Do(func() { vm.Pace(step + 40) })
		}
	}
}

// checkReport checks what every successful migration's report must hold:
// the downtime is pause → resume, divided into consecutive terms that are
// never negative and add up to it exactly, and the guest was seen to pause.
func checkReport(t *testing.T, rep orchestrator.Report) {
	t.Helper()
	if rep.Downtime <= 0 || rep.PausedAt.IsZero() || !rep.ResumedAt.After(rep.PausedAt) {
		t.Fatalf("downtime %v from %v to %v", rep.Downtime, rep.PausedAt, rep.ResumedAt)
	}
	var sum time.Duration
	for _, term := range rep.Terms {
		if term.D < 0 {
			t.Errorf("term %q is negative: %v", term.Name, term.D)
		}
		sum += term.D
	}
	if sum != rep.Downtime {
		t.Errorf("terms add up to %v, downtime %v", sum, rep.Downtime)
	}
	if rep.ClockSkewSuspect {
		t.Error("one host's clock reported as skewed")
	}
	if !rep.GuestBeats || rep.GuestGap <= 0 {
		t.Errorf("guest-observed downtime %v (beats %v)", rep.GuestGap, rep.GuestBeats)
	}
}

// TestMigrateBetweenHosts migrates a simulated VM and its vGPU between two
// gmigd over loopback TCP through the orchestrator, back and forth, while
// its guest runs a seeded workload; each strategy is used; every report
// holds pause → resume with its terms; the live strategies log the guest's
// aperture writes with uffd-wp in this process (where the simulated guest
// writes) and the full hash confirms at each stop that the log missed no
// page; the guest ends with the digest of a run that was never migrated.
func TestMigrateBetweenHosts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var beats heartbeatLog
	sims := &sim.Registry{}
	hosts := []*migHost{
		newMigHostWith(t, ctx, true, Config{Sims: sims, OnHeartbeat: beats.recorder("a")}),
		newMigHostWith(t, ctx, false, Config{Sims: sims, OnHeartbeat: beats.recorder("b")}),
	}
	vm, info, done := startSimVM(t, ctx, hosts[0], sims, 8<<20)

	offsets := map[uint64]bool{info.PoolOffset: true}
	strategies := []precopy.Strategy{precopy.OneShot, precopy.Iterative, precopy.StopCopy, precopy.OneShot}
	for i, st := range strategies {
		from, to := hosts[i%2], hosts[(i+1)%2]
		var phases []string
		release := midWorkload(t, ctx, vm, uint64(40*(i+1)))
		rep, err := from.MigrateVM(ctx, "vm", to.addr, MigrateOptions{
			Precopy: precopy.Options{Strategy: st, VerifyWriteLog: true},
			Progress: func(p orchestrator.Progress) {
				release(p)
				if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
					phases = append(phases, p.Phase)
				}
			},
		})
		if err != nil {
			t.Fatalf("migration %d (%s): %v", i, st, err)
		}
		if a := <-to.arrivals; a.Err != nil {
			t.Fatalf("migration %d: the destination says %v", i, a.Err)
		}
		checkReport(t, rep)
		if p := rep.Precopy; st != precopy.StopCopy &&
			(!strings.HasPrefix(p.Tracking, "uffd-wp (this process") || !p.Stop.WriteLog.Active || !p.Stop.WriteLogVerified) {
			t.Fatalf("migration %d (%s): tracking %q, write log %+v, verified %v; want uffd-wp, verified", i, st,
				p.Tracking, p.Stop.WriteLog, p.Stop.WriteLogVerified)
		}
		if _, err := from.GetVM("vm"); !errors.Is(err, ErrNoVM) {
			t.Fatalf("migration %d: the source still has the VM (%v)", i, err)
		}
		if _, err := from.Get("vm"); !errors.Is(err, ErrNotFound) {
			t.Fatalf("migration %d: the source still has the vGPU (%v)", i, err)
		}
		arrived, err := to.Get("vm")
		if err != nil || arrived.State != stateLive {
			t.Fatalf("migration %d: the destination's vGPU: %+v, %v", i, arrived, err)
		}
		if vi, err := to.GetVM("vm"); err != nil || vi.State != vmRunning {
			t.Fatalf("migration %d: the destination's VM: %+v, %v", i, vi, err)
		}
		if want := []string{orchestrator.PhasePrepare, orchestrator.PhaseVGPULive, orchestrator.PhaseVMMLive,
			orchestrator.PhaseStop, orchestrator.PhaseSwitchover, orchestrator.PhaseCommit}; !hasPrefix(phases, want) {
			t.Errorf("migration %d: phases %v, want %v first", i, phases, want)
		}
		offsets[arrived.PoolOffset] = true
		t.Logf("migration %d (%s): downtime %.2f ms (guest saw %.2f ms), %d dirty pages, %d hashed, pool offset %#x; tracking %s", i, st,
			ms(rep.Downtime), ms(rep.GuestGap), rep.Precopy.Stop.DirtyPages, rep.Precopy.Stop.PagesHashed, arrived.PoolOffset,
			rep.Precopy.TrackingLine())
	}
	vm.Pace(0)
	if err := <-done; err != nil {
		t.Fatalf("workload: %v", err)
	}
	got, err := vm.Digest()
	if err != nil {
		t.Fatal(err)
	}
	// The guest's heartbeat went on across the moves, seen by both hosts'
	// clocks, in order.
	if n, hostsSeen, ordered := beats.summary("vm"); n == 0 || hostsSeen != 2 || !ordered {
		t.Fatalf("heartbeats: %d seen, from %d hosts, in order %v", n, hostsSeen, ordered)
	}
	if len(offsets) < 2 {
		t.Fatalf("the vGPU never changed pool offset: %v", offsets)
	}
	if want := reference(t, ctx, hosts[1]); got != want {
		t.Fatalf("digest after 4 migrations %x, never migrated %x", got, want)
	}
}

func hasPrefix(got, want []string) bool {
	if len(got) < len(want) {
		return false
	}
	for i := range want {
		if got[i] != want[i] {
			return false
		}
	}
	return true
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// reference runs the test workload on a vGPU of h that never moves.
func reference(t *testing.T, ctx context.Context, h *migHost) [32]byte {
	t.Helper()
	ref, err := h.Create(vgpu.Config{Name: "ref", MemSize: 8 << 20})
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
	return want
}

// TestMigrateFailureKeepsSource: a peer that is not there, one that hangs
// up, and a destination that refuses (a VM of that name exists there)
// leave the VM and its vGPU running on the source with the guest going on
// and nothing at the destination; a later migration still works.
func TestMigrateFailureKeepsSource(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sims := &sim.Registry{}
	src := newMigHost(t, ctx, sims, false)
	vm, _, done := startSimVM(t, ctx, src, sims, 4<<20)

	// Nobody listens on a closed listener's port.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := l.Addr().String()
	l.Close()
	// A peer that accepts, reads a little and hangs up.
	hang, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer hang.Close()
	go func() {
		for {
			c, err := hang.Accept()
			if err != nil {
				return
			}
			buf := make([]byte, 64<<10)
			_, _ = c.Read(buf)
			c.Close()
		}
	}()
	// A destination where the name is taken: it refuses at Prepare.
	taken := newMigHost(t, ctx, sims, false)
	if _, err := taken.Create(vgpu.Config{Name: "vm", MemSize: 1 << 20}); err != nil {
		t.Fatal(err)
	}
	for _, peer := range []string{gone, hang.Addr().String(), taken.addr} {
		_, err := src.MigrateVM(ctx, "vm", peer, MigrateOptions{})
		if !errors.Is(err, orchestrator.ErrRolledBack) {
			t.Fatalf("migrating to %s: %v, want a roll-back", peer, err)
		}
		if vi, err := src.GetVM("vm"); err != nil || vi.State != vmRunning {
			t.Fatalf("after a failed migration to %s the VM is %+v (%v)", peer, vi, err)
		}
		if gi, err := src.Get("vm"); err != nil || gi.State != stateLive {
			t.Fatalf("after a failed migration to %s the vGPU is %+v (%v)", peer, gi, err)
		}
	}
	if got := len(taken.Pool().Partitions()); got != 1 {
		t.Fatalf("the refusing host kept %d partitions, want its own 1", got)
	}
	// The guest goes on and the device still works: a real migration now.
	dst := newMigHost(t, ctx, sims, true)
	rep, err := src.MigrateVM(ctx, "vm", dst.addr, MigrateOptions{Progress: midWorkload(t, ctx, vm, 120)})
	if err != nil {
		t.Fatal(err)
	}
	checkReport(t, rep)
	vm.Pace(0)
	if err := <-done; err != nil {
		t.Fatalf("workload: %v", err)
	}
	if _, err := src.MigrateVM(ctx, "nope", dst.addr, MigrateOptions{}); !errors.Is(err, ErrNoVM) {
		t.Fatalf("migrating an unknown VM: %v", err)
	}
}

// TestMetrics: while a migration runs the source counts it in flight under
// its phase; after it, the source's metrics count it, put its downtime in
// the histogram and carry its stop pages, nothing is in flight, the
// destination's count its arrival, and every vGPU's counters, the build
// info and the Go and process collectors are there.
func TestMetrics(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	sims := &sim.Registry{}
	a, b := newMigHost(t, ctx, sims, true), newMigHost(t, ctx, sims, false)
	vm, _, done := startSimVM(t, ctx, a, sims, 4<<20)
	var during []string // scrapes at each phase change, from the progress callback
	mid := midWorkload(t, ctx, vm, 60)
	last := ""
	progress := func(p orchestrator.Progress) {
		if p.Phase != last {
			last = p.Phase
			during = append(during, p.Phase+"\n"+scrape(t, a.Host))
		}
		mid(p)
	}
	rep, err := a.MigrateVM(ctx, "vm", b.addr, MigrateOptions{Progress: progress})
	if err != nil {
		t.Fatal(err)
	}
	<-b.arrivals
	vm.Pace(0)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if len(during) < 3 {
		t.Fatalf("phases seen: %d", len(during))
	}
	for _, d := range during {
		phase, text, _ := strings.Cut(d, "\n")
		if want := fmt.Sprintf("gmig_migrations_in_flight{phase=%q} 1", phase); !strings.Contains(text, want) {
			t.Errorf("in phase %s the metrics lack %q:\n%s", phase, want, text)
		}
	}
	src, dst := scrape(t, a.Host), scrape(t, b.Host)
	bucket := "+Inf"
	for _, le := range downtimeBuckets {
		if rep.Downtime.Seconds() <= le {
			bucket = fmt.Sprint(le)
			break
		}
	}
	for _, want := range []string{
		`gmig_migrations_total{result="started",role="source"} 1`,
		`gmig_migrations_total{result="ok",role="source"} 1`,
		"gmig_migration_downtime_seconds_count 1",
		fmt.Sprintf("gmig_migration_downtime_seconds_sum %g", rep.Downtime.Seconds()),
		fmt.Sprintf("gmig_migration_downtime_seconds_bucket{le=%q} 1", bucket),
		`gmig_last_stop_dirty_pages{source="engine"}`,
		`gmig_vgpu_faults_total{vgpu="filler"} 0`,
		`gmig_build_info{go_version="go`,
		"go_goroutines ",
		"process_open_fds ",
	} {
		if !strings.Contains(src, want) {
			t.Errorf("source metrics lack %q:\n%s", want, src)
		}
	}
	for _, phase := range []string{orchestrator.PhasePrepare, orchestrator.PhaseStop, orchestrator.PhaseDone} {
		if want := fmt.Sprintf("gmig_migrations_in_flight{phase=%q} 0", phase); !strings.Contains(src, want) {
			t.Errorf("after the migration the source metrics lack %q", want)
		}
	}
	for _, want := range []string{
		`gmig_migrations_total{result="ok",role="destination"} 1`,
		`gmig_vgpu_fences_total{vgpu="vm"}`,
	} {
		if !strings.Contains(dst, want) {
			t.Errorf("destination metrics lack %q:\n%s", want, dst)
		}
	}
}

// scrape returns h's metrics as Prometheus serves them.
func scrape(t *testing.T, h *Host) string {
	rec := httptest.NewRecorder()
	h.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	if rec.Code != http.StatusOK {
		t.Fatalf("metrics: status %d", rec.Code)
	}
	return rec.Body.String()
}
