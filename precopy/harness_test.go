package precopy

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/internal/vgpu"
)

// served is a vGPU on a vfio-user socket, as a gmigd serves it.
type served struct {
	v      *vgpu.VGPU
	path   string
	cancel context.CancelFunc
	done   chan error
	l      *net.UnixListener
	once   sync.Once
}

// serveNew creates a vGPU in p and serves it.
func serveNew(t *testing.T, p *pool.Pool, name string, mem uint64) *served {
	t.Helper()
	v, err := vgpu.New(vgpu.Config{Name: name, MemSize: mem}, p, testLog)
	if err != nil {
		t.Fatal(err)
	}
	return serve(t, v)
}

// serve serves v on a socket in a test directory until close (or the end
// of the test), then closes v.
func serve(t *testing.T, v *vgpu.VGPU) *served {
	t.Helper()
	path := filepath.Join(t.TempDir(), v.Name()+".sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		v.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &served{v: v, path: path, cancel: cancel, done: make(chan error, 1), l: l}
	go func() { s.done <- v.Serve(ctx, l) }()
	t.Cleanup(s.close)
	return s
}

func (s *served) close() {
	s.once.Do(func() {
		s.cancel()
		<-s.done
		s.l.Close()
		s.v.Close()
	})
}

// pauser is a workload gate that stops the guest at a chosen operation
// boundary, as a VM stop freezes a guest wherever it is.
type pauser struct {
	steps func() uint64 // the workload's step count, read by the gate

	mu        sync.Mutex
	countdown int // boundaries to pass before pausing; < 0: no pause asked
	paused    chan struct{}
	resume    chan struct{}
	at        uint64 // the workload's step at the last pause
}

func newPauser(steps func() uint64) *pauser { return &pauser{steps: steps, countdown: -1} }

// pausedAt is the workload's step at the last pause.
func (p *pauser) pausedAt() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.at
}

// pauseAfter asks for a pause at the n-th boundary from now. paused is
// closed when the guest has stopped; closing resume lets it go on (also
// when the pause has not happened yet: it is then called off).
func (p *pauser) pauseAfter(n int) (paused <-chan struct{}, resume func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.countdown = n
	p.paused, p.resume = make(chan struct{}), make(chan struct{})
	r := p.resume
	var once sync.Once
	return p.paused, func() {
		once.Do(func() {
			p.mu.Lock()
			if p.resume == r {
				p.countdown = -1
			}
			p.mu.Unlock()
			close(r)
		})
	}
}

func (p *pauser) gate(ctx context.Context) error {
	p.mu.Lock()
	var paused, resume chan struct{}
	switch {
	case p.countdown == 0:
		paused, resume = p.paused, p.resume
		p.countdown, p.at = -1, p.steps()
	case p.countdown > 0:
		p.countdown--
	}
	p.mu.Unlock()
	if paused == nil {
		return nil
	}
	close(paused)
	select {
	case <-resume:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// vm is a simulated guest: a driver on a simulator bus attached to a
// served vGPU, running a seeded workload on its own goroutine.
type vm struct {
	t     *testing.T
	bus   *sim.Bus
	d     *guest.Driver
	w     *guest.Workload
	gate  *pauser
	done  chan error
	moves int
}

// startVM attaches a guest to s (its driver's GTT permutation seeded with
// gttSeed) and starts steps workload steps of seed.
func startVM(ctx context.Context, t *testing.T, s *served, gttSeed, seed int64, steps int, check bool) *vm {
	t.Helper()
	bus, err := sim.Attach(s.path, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	d, err := guest.Open(bus, guest.Options{Seed: gttSeed, UseIRQ: true})
	if err != nil {
		bus.Close()
		t.Fatal(err)
	}
	w, err := guest.NewWorkload(seed, guest.WorkloadConfig{Check: check})
	if err != nil {
		bus.Close()
		t.Fatal(err)
	}
	m := &vm{t: t, bus: bus, d: d, w: w, gate: newPauser(w.Steps), done: make(chan error, 1)}
	t.Cleanup(func() { m.bus.Close() })
	w.SetGate(m.gate.gate)
	go func() { m.done <- w.Run(ctx, d, steps) }()
	return m
}

// moveTo re-attaches the (paused) guest to s keeping its RAM, as the
// destination QEMU does after a migration, and rebinds the driver.
func (m *vm) moveTo(s *served) {
	m.t.Helper()
	fd, err := unix.Dup(int(m.bus.RAMFile().Fd()))
	if err != nil {
		m.t.Fatal(err)
	}
	ram := os.NewFile(uintptr(fd), "guest-ram")
	defer ram.Close()
	if err := m.bus.Close(); err != nil {
		m.t.Fatalf("closing the guest's old bus: %v", err)
	}
	m.moves++
	bus, err := sim.Attach(s.path, sim.Options{RAM: ram, MSI: m.moves%2 == 1})
	if err != nil {
		m.t.Fatal(err)
	}
	m.bus = bus
	if err := m.d.Rebind(bus); err != nil {
		m.t.Fatal(err)
	}
}

func (m *vm) digest() [32]byte {
	m.t.Helper()
	sum, err := m.w.Digest(m.d)
	if err != nil {
		m.t.Fatal(err)
	}
	return sum
}

// reference runs seed for steps on a vGPU of p that is never migrated and
// returns the workload's digest.
func reference(ctx context.Context, t *testing.T, p *pool.Pool, seed int64, steps int, mem uint64) [32]byte {
	t.Helper()
	s := serveNew(t, p, "reference", mem)
	defer s.close()
	m := startVM(ctx, t, s, seed+1, seed, steps, false)
	if err := <-m.done; err != nil {
		t.Fatalf("reference run: %v", err)
	}
	return m.digest()
}
