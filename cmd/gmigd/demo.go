package main

import (
	"context"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/internal/vgpu"
	"github.com/gmig-dev/gmig/precopy"
)

// demo is `gmigd demo`, the README's main job: two gmigd hosts in one
// process, a vGPU on the first driven by the built-in guest simulator, a
// live migration to the second over loopback TCP while the guest runs, and
// the downtime report.
type demo struct {
	mem      uint64
	wmem     uint64
	steps    int
	at       int
	seed     int64
	strategy precopy.Strategy
	suite    bool
	log      zerolog.Logger
	beats    heartbeats
}

// heartbeats keeps the migrated vGPU's guest heartbeats as the hosts saw
// them; the largest gap between consecutive values is the guest-observed
// downtime.
type heartbeats struct {
	mu   sync.Mutex
	last uint64
	at   time.Time
	gap  time.Duration
	n    int
}

func (h *heartbeats) record(vgpu string, v uint64, at time.Time) {
	if vgpu != "demo" {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n > 0 && v == h.last+1 {
		h.gap = max(h.gap, at.Sub(h.at))
	}
	h.last, h.at, h.n = v, at, h.n+1
}

func (h *heartbeats) summary() (int, time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.n, h.gap
}

func cmdDemo(args []string) error {
	var d demo
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	mem := byteSize(64 << 20)
	fs.Var(&mem, "mem", "the migrated vGPU's graphics memory")
	wmem := byteSize(16 << 20)
	fs.Var(&wmem, "workload-mem", "graphics memory the guest's workload keeps rewriting")
	fs.IntVar(&d.steps, "steps", 600, "workload steps in all")
	fs.IntVar(&d.at, "at", 300, "workload step at which the migration starts")
	fs.Int64Var(&d.seed, "seed", 1, "workload seed")
	strategy := fs.String("strategy", string(precopy.OneShot), "pre-copy strategy: oneshot, iterative or stopcopy")
	fs.BoolVar(&d.suite, "suite", true, "run the correctness suite on a scratch vGPU first")
	logLevel := fs.String("log-level", "warn", "gmigd log level")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var err error
	if d.strategy, err = precopy.ParseStrategy(*strategy); err != nil {
		return err
	}
	if d.at <= 0 || d.at >= d.steps {
		return fmt.Errorf("-at %d must be within (0, -steps %d)", d.at, d.steps)
	}
	d.mem, d.wmem = uint64(mem), uint64(wmem)
	if d.log, err = newLogger(*logLevel); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return d.run(ctx)
}

// demoHost is one in-process gmigd with its migration listener.
type demoHost struct {
	*hostd.Host
	dir      string
	addr     string
	incoming chan hostd.Info
}

func (d *demo) newHost(ctx context.Context, name string) (*demoHost, error) {
	dir, err := os.MkdirTemp("", "gmig-demo-"+name+"-")
	if err != nil {
		return nil, err
	}
	h, err := hostd.New(hostd.Config{
		PoolSize: 2*d.mem + 32<<20, RunDir: dir, Log: d.log.With().Str("host", name).Logger(),
		OnHeartbeat: d.beats.record,
	})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	l, err := h.ListenMigrations("127.0.0.1:0")
	if err != nil {
		h.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	dh := &demoHost{Host: h, dir: dir, addr: l.Addr().String(), incoming: make(chan hostd.Info, 1)}
	go func() {
		_ = h.ServeMigrations(ctx, l, nil, func(info hostd.Info, _ precopy.Report) { dh.incoming <- info })
	}()
	return dh, nil
}

func (h *demoHost) close() {
	h.Close()
	os.RemoveAll(h.dir)
}

func (d *demo) run(ctx context.Context) error {
	a, err := d.newHost(ctx, "a")
	if err != nil {
		return err
	}
	defer a.close()
	b, err := d.newHost(ctx, "b")
	if err != nil {
		return err
	}
	defer b.close()
	// A neighbour on host A, so the migrated vGPU's pool offset differs
	// between the hosts and remapping is real.
	if _, err := a.Create(vgpu.Config{Name: "neighbour", MemSize: 16 << 20}); err != nil {
		return err
	}
	fmt.Printf("gmigd demo: two gmigd hosts in this process, migrations over loopback TCP (A %s, B %s)\n", a.addr, b.addr)
	if d.suite {
		if err := d.runSuite(a); err != nil {
			return err
		}
	}
	want, err := d.reference(ctx, b)
	if err != nil {
		return fmt.Errorf("reference run: %w", err)
	}

	info, err := a.Create(vgpu.Config{Name: "demo", MemSize: d.mem})
	if err != nil {
		return err
	}
	if err := d.prefill(a, "demo"); err != nil {
		return err
	}
	fmt.Printf("vGPU %q: %d MiB on host A at pool offset %#x, 3/4 of its pages holding data\n", info.Name, info.MemSize>>20, info.PoolOffset)
	vm, err := sim.StartVM(info.Socket, d.seed, guest.WorkloadConfig{MemSize: d.wmem}, sim.Options{MSI: true})
	if err != nil {
		return err
	}
	defer vm.Close()
	stopBeat := vm.StartHeartbeat(time.Millisecond)
	defer stopBeat()
	done := make(chan error, 1)
	t0 := time.Now()
	go func() { done <- vm.Run(ctx, d.steps) }()
	fmt.Printf("guest: seeded workload (seed %d), %d steps over %d MiB of graphics memory, running\n", d.seed, d.steps, d.wmem>>20)
	if err := vm.WaitStep(ctx, uint64(d.at)); err != nil {
		return err
	}
	fmt.Printf("step %d: live migration A -> B (%s): pre-copy while the guest runs, then stop-and-copy\n", d.at, d.strategy)
	rep, err := a.Migrate(ctx, "demo", b.addr, hostd.MigrateOptions{
		Precopy: precopy.Options{Strategy: d.strategy},
		Pause:   vm.Pause,
		Resume:  vm.Resume,
	})
	if err != nil {
		return err
	}
	arrived := <-b.incoming
	if err := vm.Move(arrived.Socket); err != nil {
		return err
	}
	v, err := b.VGPU("demo")
	if err != nil {
		return err
	}
	v.Resume()
	vm.Resume()
	fmt.Printf("vGPU %q now on host B at pool offset %#x; the guest re-attached and goes on\n\n", arrived.Name, arrived.PoolOffset)
	fmt.Print(indent(rep.String(), "  "))
	fmt.Printf("  downtime (stop phase) %.2f ms\n\n", float64(rep.Stop.Total)/float64(time.Millisecond))
	if err := <-done; err != nil {
		return fmt.Errorf("workload after the migration: %w", err)
	}
	stopBeat()
	n, gap := d.beats.summary()
	fmt.Printf("guest-observed downtime: %.2f ms (largest gap between %d heartbeats written every 1 ms, host clock; it includes the simulator re-attaching, as a destination QEMU would)\n",
		float64(gap)/float64(time.Millisecond), n)
	got, err := vm.Digest()
	if err != nil {
		return err
	}
	verdict := "equals a never-migrated run of the same seed: ok"
	if got != want {
		verdict = "DIFFERS from the never-migrated run " + hex.EncodeToString(want[:8])
	}
	fmt.Printf("workload finished on host B in %s; digest %s %s\n", time.Since(t0).Round(time.Millisecond), hex.EncodeToString(got[:8]), verdict)
	if got != want {
		return errors.New("digest mismatch after migration")
	}
	return nil
}

// runSuite checks the device with the correctness suite on a scratch vGPU.
func (d *demo) runSuite(h *demoHost) error {
	info, err := h.Create(vgpu.Config{Name: "suite", MemSize: 16 << 20})
	if err != nil {
		return err
	}
	defer h.Destroy("suite")
	bus, err := sim.Attach(info.Socket, sim.Options{MSI: true})
	if err != nil {
		return err
	}
	defer bus.Close()
	drv, err := guest.Open(bus, guest.Options{Seed: d.seed, UseIRQ: true})
	if err != nil {
		return err
	}
	r := guest.Suite(context.Background(), drv)
	lines := strings.Split(strings.TrimSpace(r.String()), "\n")
	fmt.Printf("correctness suite on a scratch vGPU: %s\n", lines[len(lines)-1])
	if !r.OK() {
		fmt.Print(r)
		return fmt.Errorf("%d suite checks failed", len(r.Failed()))
	}
	return nil
}

// reference runs the same workload on a vGPU that never moves.
func (d *demo) reference(ctx context.Context, h *demoHost) ([32]byte, error) {
	info, err := h.Create(vgpu.Config{Name: "reference", MemSize: d.mem})
	if err != nil {
		return [32]byte{}, err
	}
	defer h.Destroy("reference")
	if err := d.prefill(h, "reference"); err != nil {
		return [32]byte{}, err
	}
	vm, err := sim.StartVM(info.Socket, d.seed, guest.WorkloadConfig{MemSize: d.wmem}, sim.Options{MSI: true})
	if err != nil {
		return [32]byte{}, err
	}
	defer vm.Close()
	if err := vm.Run(ctx, d.steps); err != nil {
		return [32]byte{}, err
	}
	return vm.Digest()
}

// prefill gives 3 of 4 pages of a vGPU's memory seeded contents, as a guest's
// textures and buffers would, so a migration has real data to move.
func (d *demo) prefill(h *demoHost, name string) error {
	v, err := h.VGPU(name)
	if err != nil {
		return err
	}
	mem := v.Memory()
	rng := rand.New(rand.NewPCG(uint64(d.seed), 0x9e3779b97f4a7c15))
	for off := 0; off+4096 <= len(mem); off += 4096 {
		if rng.IntN(4) == 0 {
			continue
		}
		for i := off; i < off+4096; i += 8 {
			binary.LittleEndian.PutUint64(mem[i:], rng.Uint64())
		}
	}
	return nil
}

func indent(s, pre string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return pre + strings.Join(lines, "\n"+pre) + "\n"
}
