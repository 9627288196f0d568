package migtest

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/internal/sim"
)

// Progress is how far a workload has got: steps and operations completed,
// operations by kind.
type Progress struct {
	Steps uint64
	Ops   map[guest.OpKind]uint64
}

// Total is the number of operations.
func (p Progress) Total() uint64 {
	var n uint64
	for _, c := range p.Ops {
		n += c
	}
	return n
}

func (p Progress) sub(q Progress) Progress {
	d := Progress{Steps: p.Steps - q.Steps, Ops: map[guest.OpKind]uint64{}}
	for k, n := range p.Ops {
		if n > q.Ops[k] {
			d.Ops[k] = n - q.Ops[k]
		}
	}
	return d
}

func (p Progress) String() string { return fmt.Sprintf("%d steps, ops %v", p.Steps, p.Ops) }

// VM is a simulated guest: a driver on a simulator bus attached to a
// served vGPU and, once started, a seeded workload on its own goroutine.
// The workload's gate (guest.Workload.SetGate) records its progress at
// every operation boundary, so a test can tell what the guest did while
// something else ran, and stops it at a boundary on request, as a VM stop
// freezes a guest wherever it is. Methods other than Start may be called
// from any goroutine.
type VM struct {
	T   testing.TB
	Bus *sim.Bus
	D   *guest.Driver
	W   *guest.Workload // nil until Start

	moves    int
	finished chan struct{}
	err      error // Run's, once finished is closed

	mu      sync.Mutex
	history []Progress    // at each boundary passed, in order
	tick    chan struct{} // closed and replaced at each boundary
	pause   *pauseReq
	at      uint64 // the workload's step at the last pause
}

// pauseReq is a pause PauseAfter asked for.
type pauseReq struct {
	mark, after    int
	until          func(Progress) bool
	paused, resume chan struct{}
}

// Attach attaches a guest to s: a simulator bus with opts and a driver
// whose GTT permutation is seeded with gttSeed, waiting on interrupts.
func Attach(t testing.TB, s *Served, gttSeed int64, opts sim.Options) *VM {
	t.Helper()
	bus, err := sim.Attach(s.Path, opts)
	if err != nil {
		t.Fatal(err)
	}
	d, err := guest.Open(bus, guest.Options{Seed: gttSeed, UseIRQ: true})
	if err != nil {
		bus.Close()
		t.Fatal(err)
	}
	m := &VM{T: t, Bus: bus, D: d, tick: make(chan struct{}), finished: make(chan struct{})}
	t.Cleanup(func() { m.Bus.Close() })
	return m
}

// StartVM attaches a guest to s (Attach, no MSI) and starts steps steps of
// the workload of seed and cfg.
func StartVM(ctx context.Context, t testing.TB, s *Served, gttSeed, seed int64, steps int, cfg guest.WorkloadConfig) *VM {
	t.Helper()
	m := Attach(t, s, gttSeed, sim.Options{})
	m.Start(ctx, seed, steps, cfg)
	return m
}

// Start starts steps steps of the workload of seed and cfg on a goroutine
// of its own. Call it once, from the test's goroutine.
func (m *VM) Start(ctx context.Context, seed int64, steps int, cfg guest.WorkloadConfig) {
	m.T.Helper()
	w, err := guest.NewWorkload(seed, cfg)
	if err != nil {
		m.T.Fatal(err)
	}
	m.W = w
	w.SetGate(m.gate)
	go func() {
		m.err = w.Run(ctx, m.D, steps)
		close(m.finished)
	}()
}

// Finished is closed when the workload has run (or failed).
func (m *VM) Finished() <-chan struct{} { return m.finished }

// Wait waits for the workload to end and returns its error.
func (m *VM) Wait() error {
	<-m.finished
	return m.err
}

// gate runs on the workload's goroutine before each operation and each
// step's closing fence.
func (m *VM) gate(ctx context.Context) error {
	now := Progress{Steps: m.W.Steps(), Ops: m.W.OpCounts()}
	m.mu.Lock()
	m.history = append(m.history, now)
	close(m.tick)
	m.tick = make(chan struct{})
	r := m.pause
	if r == nil || len(m.history)-1 < r.mark+r.after || (r.until != nil && !r.until(m.sinceLocked(r.mark))) {
		m.mu.Unlock()
		return nil
	}
	m.pause, m.at = nil, now.Steps
	m.mu.Unlock()
	close(r.paused)
	select {
	case <-r.resume:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Mark marks the workload's next operation boundary, for Since.
func (m *VM) Mark() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.history)
}

// Since is the progress from the first boundary after mark to the latest
// one: the operations that began after Mark returned and have ended.
func (m *VM) Since(mark int) Progress {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.sinceLocked(mark)
}

func (m *VM) sinceLocked(mark int) Progress {
	if len(m.history) <= mark {
		return Progress{}
	}
	return m.history[len(m.history)-1].sub(m.history[mark])
}

// Await waits until cond holds for Since(mark). It fails if the workload
// ends or ctx does first.
func (m *VM) Await(ctx context.Context, mark int, cond func(Progress) bool) error {
	for {
		m.mu.Lock()
		p, tick := m.sinceLocked(mark), m.tick
		m.mu.Unlock()
		if cond(p) {
			return nil
		}
		select {
		case <-tick:
		case <-m.finished:
			return fmt.Errorf("migtest: the workload ended (%v) after %v, still waiting", m.err, p)
		case <-ctx.Done():
			return fmt.Errorf("migtest: waiting for the workload, after %v: %w", p, ctx.Err())
		}
	}
}

// PauseAfter asks for a pause at the first boundary at least after
// boundaries from now where until (nil: always) holds for the progress
// made since now. paused is closed when the guest has stopped there;
// resume lets it go on (called before the pause, it calls the pause off).
func (m *VM) PauseAfter(after int, until func(since Progress) bool) (paused <-chan struct{}, resume func()) {
	m.mu.Lock()
	defer m.mu.Unlock()
	r := &pauseReq{mark: len(m.history), after: after, until: until, paused: make(chan struct{}), resume: make(chan struct{})}
	m.pause = r
	var once sync.Once
	return r.paused, func() {
		once.Do(func() {
			m.mu.Lock()
			if m.pause == r {
				m.pause = nil
			}
			m.mu.Unlock()
			close(r.resume)
		})
	}
}

// PausedAt is the workload's step at the last pause.
func (m *VM) PausedAt() uint64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.at
}

// AttachTo plugs the (paused) guest into s keeping its RAM, as a
// migration's destination QEMU does before it loads the device's migration
// data. The driver is rebound by rebind, once s's vGPU holds the migrated
// state.
func (m *VM) AttachTo(s *Served) (bus *sim.Bus, rebind func()) {
	m.T.Helper()
	return m.attach(s, false)
}

// MoveTo re-attaches the (paused) guest to s keeping its RAM, as a
// migration's destination QEMU does, and rebinds the driver: s's vGPU
// already holds the migrated state. Every other move uses MSI.
func (m *VM) MoveTo(s *Served) {
	m.T.Helper()
	m.moves++
	_, rebind := m.attach(s, m.moves%2 == 1)
	rebind()
}

func (m *VM) attach(s *Served, msi bool) (bus *sim.Bus, rebind func()) {
	m.T.Helper()
	fd, err := unix.Dup(int(m.Bus.RAMFile().Fd()))
	if err != nil {
		m.T.Fatal(err)
	}
	ram := os.NewFile(uintptr(fd), "guest-ram")
	defer ram.Close()
	if err := m.Bus.Close(); err != nil {
		m.T.Fatalf("closing the guest's old bus: %v", err)
	}
	if bus, err = sim.Attach(s.Path, sim.Options{RAM: ram, MSI: msi}); err != nil {
		m.T.Fatal(err)
	}
	m.Bus = bus
	return bus, func() {
		if err := m.D.Rebind(bus); err != nil {
			m.T.Fatal(err)
		}
	}
}

// Digest is the workload's graphics-memory digest.
func (m *VM) Digest() [32]byte {
	m.T.Helper()
	sum, err := m.W.Digest(m.D)
	if err != nil {
		m.T.Fatal(err)
	}
	return sum
}

// Reference runs steps steps of the workload of seed and cfg (without its
// checks) on a vGPU of mem bytes in p that never migrates, and returns its
// digest.
func Reference(ctx context.Context, t testing.TB, p *pool.Pool, seed int64, steps int, mem uint64, cfg guest.WorkloadConfig) [32]byte {
	t.Helper()
	s := ServeNew(t, p, "reference", mem)
	defer s.Close()
	cfg.Check = false
	m := StartVM(ctx, t, s, seed+1, seed, steps, cfg)
	if err := m.Wait(); err != nil {
		t.Fatalf("reference run: %v", err)
	}
	return m.Digest()
}
