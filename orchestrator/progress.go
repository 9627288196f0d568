package orchestrator

import (
	"sync"
	"time"
)

// Phases of a migration, as Progress reports them.
const (
	PhasePrepare    = "prepare"      // the destination creates the vGPU and the VM
	PhaseVGPULive   = "vgpu-precopy" // the vGPU's live phase, the VM running
	PhaseVMMLive    = "vmm-precopy"  // the VMM's own pre-copy, the VM running
	PhaseStop       = "stop"         // the VM paused: the vGPU's stop phase (the VMM's switchover starts beside it at the quiesce)
	PhaseSwitchover = "switchover"   // the VM paused: the rest of the VMM's switchover after the stop phase
	PhaseCommit     = "commit"       // the VM paused: the destination resumes it
	PhaseDone       = "done"
	PhaseRollback   = "rollback" // failed: the source runs on
)

// Progress is a snapshot of a migration in flight.
type Progress struct {
	ID      string        `json:"id"`
	Phase   string        `json:"phase"`
	Elapsed time.Duration `json:"elapsed_ns"`
	// The vGPU stream so far: page records and bytes sent, out of the
	// vGPU's pages, and the rate since the last snapshot (bytes/s).
	Pages      uint64      `json:"pages"`
	TotalPages uint64      `json:"total_pages"`
	Bytes      uint64      `json:"bytes"`
	Rate       float64     `json:"rate"`
	VMM        VMMProgress `json:"vmm"`
}

// progressPeriod is how often a migration in flight reports.
const progressPeriod = 250 * time.Millisecond

// reporter sends Progress snapshots to a callback: at every phase change
// and every progressPeriod in between, from one goroutine.
type reporter struct {
	fn      func(Progress)
	sample  func() (pages, bytes uint64)
	vmm     func() VMMProgress
	start   time.Time
	total   uint64
	id      string
	emitMu  sync.Mutex // held from a snapshot to its delivery: calls of fn never overlap, nor reorder
	mu      sync.Mutex
	phase   string
	last    time.Time
	lastB   uint64
	stop    chan struct{}
	stopped chan struct{}
}

func newReporter(id string, fn func(Progress), vmm func() VMMProgress) *reporter {
	r := &reporter{fn: fn, vmm: vmm, start: time.Now(), id: id, stop: make(chan struct{}), stopped: make(chan struct{})}
	if fn == nil {
		close(r.stopped)
		return r
	}
	go r.loop()
	return r
}

// track makes later snapshots count the vGPU stream through sample.
func (r *reporter) track(sample func() (pages, bytes uint64), total uint64) {
	r.mu.Lock()
	r.sample, r.total = sample, total
	r.mu.Unlock()
}

// enter reports a new phase at once.
func (r *reporter) enter(phase string) {
	r.mu.Lock()
	r.phase = phase
	r.mu.Unlock()
	r.emit()
}

func (r *reporter) loop() {
	defer close(r.stopped)
	t := time.NewTicker(progressPeriod)
	defer t.Stop()
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
			r.emit()
		}
	}
}

func (r *reporter) emit() {
	if r.fn == nil {
		return
	}
	// Snapshots reach fn in the order they are taken: a periodic one
	// taken before a phase change never arrives after it.
	r.emitMu.Lock()
	defer r.emitMu.Unlock()
	r.mu.Lock()
	now := time.Now()
	p := Progress{ID: r.id, Phase: r.phase, Elapsed: now.Sub(r.start), TotalPages: r.total}
	if r.sample != nil {
		p.Pages, p.Bytes = r.sample()
		if dt := now.Sub(r.last).Seconds(); !r.last.IsZero() && dt > 0 && p.Bytes >= r.lastB {
			p.Rate = float64(p.Bytes-r.lastB) / dt
		}
		r.last, r.lastB = now, p.Bytes
	}
	r.mu.Unlock()
	if r.vmm != nil {
		p.VMM = r.vmm()
	}
	r.fn(p)
}

// close stops the periodic snapshots.
func (r *reporter) close() {
	select {
	case <-r.stop:
	default:
		close(r.stop)
	}
	<-r.stopped
}
