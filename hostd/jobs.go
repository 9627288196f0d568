package hostd

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/gmig-dev/gmig/orchestrator"
)

// The table of migrations (gmigd migrate-status, migrate-cancel,
// migrate-set-bandwidth): every outgoing migration of this host while it
// runs, and the last keepJobs that ended, with what the orchestrator
// reports of each.

// keepJobs is how many ended migrations the table keeps: a page of
// `gmigd migrate-status` (gmigd's choice; older ones are in the log).
const keepJobs = 32

// Errors of the table of migrations.
var (
	// ErrNoJob is an ID or VM name that names no migration in the table.
	ErrNoJob = errors.New("hostd: no such migration")
	// ErrJobEnded refuses to cancel or change a migration that has ended.
	ErrJobEnded = errors.New("hostd: the migration has ended")
)

// Job is one outgoing migration as the control API shows it.
type Job struct {
	ID       string    `json:"id"`
	VM       string    `json:"vm"`
	Peer     string    `json:"peer"`
	Strategy string    `json:"strategy"`
	Phase    string    `json:"phase"` // the orchestrator's Phase constants
	Started  time.Time `json:"started"`
	// Ended is zero while the migration runs.
	Ended   time.Time     `json:"ended,omitzero"`
	Elapsed time.Duration `json:"elapsed_ns"`
	// Bytes sent so far: the vGPU stream's and the VMM's RAM, and their
	// sum; rates in bytes/s over the last progress period.
	VGPUBytes uint64  `json:"vgpu_bytes"`
	RAMBytes  uint64  `json:"ram_bytes"`
	Bytes     uint64  `json:"bytes"`
	VGPURate  float64 `json:"vgpu_rate"`
	RAMRate   float64 `json:"ram_rate"`
	// Bandwidth is the limit on both streams together, bytes/s (0: none).
	Bandwidth   uint64        `json:"bandwidth"`
	MaxDowntime time.Duration `json:"max_downtime_ns,omitempty"`
	// Estimate is the stop phase as estimated before the pause (only with
	// a MaxDowntime).
	Estimate *orchestrator.Estimate `json:"estimate,omitempty"`
	// Report, Outcome (the Outcome constants) and Error are set once the
	// migration has ended.
	Report  *orchestrator.Report `json:"report,omitempty"`
	Outcome string               `json:"outcome,omitempty"`
	Error   string               `json:"error,omitempty"`
}

// jobTable is the table of migrations; its zero value is empty.
type jobTable struct {
	mu   sync.Mutex
	live []*jobRec // in flight, oldest first
	done []Job     // ended, oldest first, at most keepJobs
	// early holds answers that came before their migration's end was
	// entered (resolved runs on the orchestrator's own goroutine).
	early map[string]bool
}

// jobRec is a migration in flight.
type jobRec struct {
	job   Job
	ctl   *orchestrator.Control
	lastT time.Time // the last snapshot's, for the RAM rate
}

// start enters a migration that begins now.
func (t *jobTable) start(j Job, ctl *orchestrator.Control) *jobRec {
	j.ID, j.Phase, j.Started, j.Bandwidth = ctl.ID(), orchestrator.PhasePrepare, time.Now(), ctl.Bandwidth()
	r := &jobRec{job: j, ctl: ctl}
	t.mu.Lock()
	t.live = append(t.live, r)
	t.mu.Unlock()
	return r
}

// progress takes a snapshot of r's migration.
func (t *jobTable) progress(r *jobRec, p orchestrator.Progress) {
	t.mu.Lock()
	defer t.mu.Unlock()
	j := &r.job
	now := time.Now()
	if dt := now.Sub(r.lastT).Seconds(); !r.lastT.IsZero() && dt > 0 && p.VMM.Transferred >= j.RAMBytes {
		j.RAMRate = float64(p.VMM.Transferred-j.RAMBytes) / dt
	}
	r.lastT = now
	j.Phase, j.Elapsed = p.Phase, p.Elapsed
	j.VGPUBytes, j.VGPURate, j.RAMBytes = p.Bytes, p.Rate, p.VMM.Transferred
	j.Bytes = j.VGPUBytes + j.RAMBytes
}

// end moves r's migration to the ended ones with its report and error.
func (t *jobTable) end(r *jobRec, rep orchestrator.Report, err error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	j := t.snapshotLocked(r)
	j.Ended, j.Elapsed = time.Now(), rep.Total
	j.Report, j.Estimate, j.Outcome = &rep, rep.Estimate, MigrationOutcome(err)
	switch {
	case err == nil:
		j.Phase = orchestrator.PhaseDone
	case errors.Is(err, orchestrator.ErrOutcomeUnknown):
		j.Phase = orchestrator.PhaseCommit
	default:
		j.Phase = orchestrator.PhaseRollback
	}
	if err != nil {
		j.Error = err.Error()
	}
	if runs, ok := t.early[j.ID]; ok {
		delete(t.early, j.ID)
		j.Outcome, j.Phase = resolvedOutcome(runs)
	}
	t.live = slices.DeleteFunc(t.live, func(x *jobRec) bool { return x == r })
	t.done = append(t.done, j)
	if len(t.done) > keepJobs {
		t.done = slices.Delete(t.done, 0, len(t.done)-keepJobs)
	}
}

// resolved records the answer to an ended migration whose outcome was
// unknown: the VM runs at the destination, or at the source again.
func (t *jobTable) resolved(id string, runsThere bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range t.done {
		if j := &t.done[i]; j.ID == id {
			j.Outcome, j.Phase = resolvedOutcome(runsThere)
			return
		}
	}
	if t.early == nil {
		t.early = map[string]bool{}
	}
	t.early[id] = runsThere
}

// resolvedOutcome is the outcome and last phase of a migration whose
// unknown outcome was resolved.
func resolvedOutcome(runsThere bool) (outcome, phase string) {
	if runsThere {
		return OutcomeMigrated, orchestrator.PhaseDone
	}
	return OutcomeRolledBack, orchestrator.PhaseRollback
}

// snapshotLocked is r's Job now.
func (t *jobTable) snapshotLocked(r *jobRec) Job {
	j := r.job
	j.Bandwidth = r.ctl.Bandwidth()
	if e, ok := r.ctl.Estimate(); ok {
		j.Estimate = &e
	}
	return j
}

// list is every migration: in flight (newest first), then ended (newest
// first).
func (t *jobTable) list() []Job {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Job, 0, len(t.live)+len(t.done))
	for i := len(t.live) - 1; i >= 0; i-- {
		out = append(out, t.snapshotLocked(t.live[i]))
	}
	for i := len(t.done) - 1; i >= 0; i-- {
		out = append(out, t.done[i])
	}
	return out
}

// find returns the migration ref names: its ID, or a VM's name (its
// migration in flight, else its latest), and its record while in flight.
func (t *jobTable) find(ref string) (Job, *jobRec, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, byVM := range []bool{false, true} {
		match := func(j Job) bool { return !byVM && j.ID == ref || byVM && j.VM == ref }
		for i := len(t.live) - 1; i >= 0; i-- {
			if r := t.live[i]; match(r.job) {
				return t.snapshotLocked(r), r, nil
			}
		}
		for i := len(t.done) - 1; i >= 0; i-- {
			if match(t.done[i]) {
				return t.done[i], nil, nil
			}
		}
	}
	return Job{}, nil, fmt.Errorf("%w: %q (neither a migration ID nor a VM with one)", ErrNoJob, ref)
}

// Jobs lists the migrations from this host: in flight, then the last
// ended ones, newest first.
func (h *Host) Jobs() []Job { return h.jobs.list() }

// Job describes the migration ref names: its ID, or a VM's name (the VM's
// migration in flight, else its latest).
func (h *Host) Job(ref string) (Job, error) {
	j, _, err := h.jobs.find(ref)
	return j, err
}

// CancelJob cancels the migration ref names (Job's ref): it rolls back,
// and the VM runs on here. It returns at once; the migration's own answer
// and the table say when the rollback is done. A migration past its commit
// point is refused with orchestrator.ErrCommitted, one that ended with
// ErrJobEnded.
func (h *Host) CancelJob(ref, reason string) (Job, error) {
	j, r, err := h.jobs.find(ref)
	switch {
	case err != nil:
		return Job{}, err
	case r == nil:
		return j, fmt.Errorf("%w: %s (%s)", ErrJobEnded, j.ID, j.Outcome)
	}
	if err := r.ctl.Cancel(reason); err != nil {
		if errors.Is(err, orchestrator.ErrFinished) {
			err = fmt.Errorf("%w: %s", ErrJobEnded, j.ID)
		}
		return j, fmt.Errorf("hostd: cancelling migration %s: %w", j.ID, err)
	}
	h.log.Info().Str("migration", j.ID).Str("vm", j.VM).Str("phase", j.Phase).Str("reason", reason).Msg("migration cancelled")
	return j, nil
}

// SetJobBandwidth changes the bandwidth limit of the migration ref names
// (Job's ref) on the vGPU stream and the VMM's RAM together, in bytes/s
// (0: none), while it runs.
func (h *Host) SetJobBandwidth(ref string, bytesPerSec uint64) (Job, error) {
	j, r, err := h.jobs.find(ref)
	switch {
	case err != nil:
		return Job{}, err
	case r == nil:
		return j, fmt.Errorf("%w: %s (%s)", ErrJobEnded, j.ID, j.Outcome)
	}
	r.ctl.SetBandwidth(bytesPerSec)
	j.Bandwidth = bytesPerSec
	h.log.Info().Str("migration", j.ID).Str("vm", j.VM).Uint64("bandwidth", bytesPerSec).Msg("migration bandwidth changed")
	return j, nil
}
