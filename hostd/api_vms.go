package hostd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/precopy"
	"github.com/gmig-dev/gmig/precopy/stream"
)

// AdoptRequest is the body of POST /v1/vms/{name}/adopt.
type AdoptRequest struct {
	QMP  string `json:"qmp"`  // the VM's QMP socket
	VGPU string `json:"vgpu"` // the vGPU on this host it uses
}

// MigrateRequest is the body of POST /v1/vms/{name}/migrate.
type MigrateRequest struct {
	To             string `json:"to"`                        // the destination gmigd's migration address, host:port
	Strategy       string `json:"strategy,omitempty"`        // oneshot (default), iterative, stopcopy
	BackgroundRate int    `json:"background_rate,omitempty"` // oneshot: background re-hash, pages/s
	MaxBandwidthMB uint64 `json:"max_bandwidth_mb,omitempty"`
	DowntimeMS     int64  `json:"downtime_limit_ms,omitempty"`
	// Bandwidth limits the vGPU stream and QEMU's RAM together, bytes/s
	// (0: none); POST /v1/migrations/{id}/bandwidth changes it.
	Bandwidth uint64 `json:"bandwidth,omitempty"`
	// MaxDowntimeMS bounds the estimated pause → resume: more pre-copy,
	// or a rollback with the reason, rather than exceed it (0: none).
	MaxDowntimeMS int64 `json:"max_downtime_ms,omitempty"`
	// DryRun checks the destination and estimates the stop phase; nothing
	// moves (the answer is one line, {"check": ...}).
	DryRun  bool `json:"dry_run,omitempty"`
	Streams int  `json:"streams,omitempty"` // the vGPU stop phase's streams (0: the daemon's -streams)
	// NoTracking turns the log of the guest's aperture writes off: the
	// stop phase hashes every page (for comparisons).
	NoTracking bool `json:"no_tracking,omitempty"`
	// VerifyTracking also hashes every page the write log let the stop
	// phase skip and fails the migration if one changed (a debugging
	// check; it costs what the log saves).
	VerifyTracking bool `json:"verify_tracking,omitempty"`
}

// MigrateEvent is one line of a migration's answer.
type MigrateEvent struct {
	Progress *orchestrator.Progress    `json:"progress,omitempty"`
	Report   *orchestrator.Report      `json:"report,omitempty"`
	Check    *orchestrator.CheckReport `json:"check,omitempty"` // a dry run's answer
	Error    string                    `json:"error,omitempty"`
	// Outcome is set on the last line: where the VM is (the Outcome
	// constants).
	Outcome string `json:"outcome,omitempty"`
}

// A migration's outcomes, as its answer's last line names them: one per
// outcome error of the orchestrator, and one for a migration refused
// before anything moved.
const (
	OutcomeMigrated   = "migrated"    // the VM runs at the destination
	OutcomeRolledBack = "rolled-back" // orchestrator.ErrRolledBack: it runs on at the source
	OutcomeNotResumed = "not-resumed" // orchestrator.ErrNotResumed: the source could not resume it
	OutcomeUnknown    = "unknown"     // orchestrator.ErrOutcomeUnknown: paused at the source until the destination answers
	OutcomeNotStarted = "not-started" // refused before it began (the VM's state): the VM is as it was
)

// outcomeErrors pairs the outcomes of failed migrations with the
// orchestrator's errors for them.
var outcomeErrors = []struct {
	outcome string
	err     error
}{
	{OutcomeRolledBack, orchestrator.ErrRolledBack},
	{OutcomeNotResumed, orchestrator.ErrNotResumed},
	{OutcomeUnknown, orchestrator.ErrOutcomeUnknown},
}

// MigrationOutcome is the outcome of a migration that MigrateVM ended
// with err. Every error of a migration that began wraps one of the
// orchestrator's outcome errors; any other refused it before it began.
func MigrationOutcome(err error) string {
	if err == nil {
		return OutcomeMigrated
	}
	for _, o := range outcomeErrors {
		if errors.Is(err, o.err) {
			return o.outcome
		}
	}
	return OutcomeNotStarted
}

func (h *Host) vmRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/vms", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, h.ListVMs())
	})
	mux.HandleFunc("POST /v1/vms", func(w http.ResponseWriter, r *http.Request) {
		var req StartVMRequest
		if err := decodeBody(r, &req); err != nil {
			writeError(w, err)
			return
		}
		if err := req.check(); err != nil {
			writeError(w, err)
			return
		}
		info, err := h.StartVM(r.Context(), req)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, info)
	})
	mux.HandleFunc("GET /v1/vms/{name}", func(w http.ResponseWriter, r *http.Request) {
		info, err := h.GetVM(r.PathValue("name"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, info)
	})
	mux.HandleFunc("DELETE /v1/vms/{name}", func(w http.ResponseWriter, r *http.Request) {
		if err := h.StopVM(r.PathValue("name")); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("POST /v1/vms/{name}/adopt", func(w http.ResponseWriter, r *http.Request) {
		var req AdoptRequest
		if err := decodeBody(r, &req); err != nil {
			writeError(w, err)
			return
		}
		info, err := h.AdoptVM(r.Context(), r.PathValue("name"), req.QMP, req.VGPU)
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, info)
	})
	mux.HandleFunc("POST /v1/vms/{name}/migrate", h.serveMigrate)
}

// check refuses what StartVM would otherwise default or pass on to QEMU
// to fail there: a negative size or count, a GTT too small for the vGPU.
func (req StartVMRequest) check() error {
	if req.QEMU.MemoryMB < 0 || req.QEMU.CPUs < 0 {
		return fmt.Errorf("%w: memory_mb %d, cpus %d: want positive values (or 0: the defaults)", errBadRequest, req.QEMU.MemoryMB, req.QEMU.CPUs)
	}
	return checkGTT(req.MemSize, req.GTTEntries)
}

// serveMigrate runs a migration and streams its progress and report.
func (h *Host) serveMigrate(w http.ResponseWriter, r *http.Request) {
	var req MigrateRequest
	if err := decodeBody(r, &req); err != nil {
		writeError(w, err)
		return
	}
	strategy, err := precopy.ParseStrategy(req.Strategy)
	if err != nil {
		writeError(w, err)
		return
	}
	if req.Streams < 0 || req.Streams > stream.MaxShards {
		writeError(w, fmt.Errorf("%w: streams %d: want 1 … %d (0: the daemon's)", errBadRequest, req.Streams, stream.MaxShards))
		return
	}
	if req.To == "" {
		writeError(w, fmt.Errorf("%w: no destination (\"to\")", errBadRequest))
		return
	}
	if req.BackgroundRate < 0 || req.DowntimeMS < 0 || req.MaxDowntimeMS < 0 {
		writeError(w, fmt.Errorf("%w: background_rate %d, downtime_limit_ms %d, max_downtime_ms %d: want values ≥ 0",
			errBadRequest, req.BackgroundRate, req.DowntimeMS, req.MaxDowntimeMS))
		return
	}
	name := r.PathValue("name")
	if _, err := h.GetVM(name); err != nil {
		writeError(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	var mu sync.Mutex
	enc := json.NewEncoder(w)
	flusher, _ := w.(http.Flusher)
	send := func(e MigrateEvent) {
		mu.Lock()
		defer mu.Unlock()
		_ = enc.Encode(e)
		if flusher != nil {
			flusher.Flush()
		}
	}
	// The migration must not stop when the client goes away: a half-done
	// migration resolves itself (roll-back or commit), never by a dropped
	// HTTP connection.
	ctx := context.WithoutCancel(r.Context())
	opts := MigrateOptions{
		Precopy:       precopy.Options{Strategy: strategy, BackgroundRate: req.BackgroundRate, Streams: req.Streams, VerifyWriteLog: req.VerifyTracking},
		NoTracking:    req.NoTracking,
		Progress:      func(p orchestrator.Progress) { send(MigrateEvent{Progress: &p}) },
		MaxBandwidth:  req.MaxBandwidthMB << 20,
		DowntimeLimit: time.Duration(req.DowntimeMS) * time.Millisecond,
		Bandwidth:     req.Bandwidth,
		MaxDowntime:   time.Duration(req.MaxDowntimeMS) * time.Millisecond,
	}
	if req.DryRun {
		check, err := h.CheckMigration(r.Context(), name, req.To, opts)
		ev := MigrateEvent{Check: &check, Outcome: OutcomeNotStarted}
		if err != nil {
			ev.Error = err.Error()
		}
		send(ev)
		return
	}
	rep, err := h.MigrateVM(ctx, name, req.To, opts)
	ev := MigrateEvent{Report: &rep, Outcome: MigrationOutcome(err)}
	if err != nil {
		ev.Error = err.Error()
	}
	send(ev)
}

// ListVMs lists the VMs.
func (c *Client) ListVMs() ([]VMInfo, error) {
	var out []VMInfo
	return out, c.do(http.MethodGet, "/v1/vms", nil, &out)
}

// StartVM starts a VM.
func (c *Client) StartVM(req StartVMRequest) (VMInfo, error) {
	if err := CheckName(req.Name); err != nil {
		return VMInfo{}, err
	}
	var out VMInfo
	return out, c.do(http.MethodPost, "/v1/vms", req, &out)
}

// StopVM stops a VM.
func (c *Client) StopVM(name string) error {
	p, err := namePath("/v1/vms/", name, "")
	if err != nil {
		return err
	}
	return c.do(http.MethodDelete, p, nil, nil)
}

// AdoptVM adopts a running QEMU.
func (c *Client) AdoptVM(name string, req AdoptRequest) (VMInfo, error) {
	p, err := namePath("/v1/vms/", name, "/adopt")
	if err != nil {
		return VMInfo{}, err
	}
	if err := CheckName(req.VGPU); err != nil {
		return VMInfo{}, err
	}
	var out VMInfo
	return out, c.do(http.MethodPost, p, req, &out)
}

// CheckMigration runs a dry run of a migration (req.DryRun is implied):
// the destination's checks and the estimate; nothing moves. A check that
// fails is a *MigrationError (outcome "not-started") with the report.
func (c *Client) CheckMigration(ctx context.Context, name string, req MigrateRequest) (orchestrator.CheckReport, error) {
	req.DryRun = true
	var check orchestrator.CheckReport
	_, err := c.migrate(ctx, name, req, func(e MigrateEvent) {
		if e.Check != nil {
			check = *e.Check
		}
	})
	return check, err
}

// ErrMigrationFailed is wrapped in every MigrationError.
var ErrMigrationFailed = errors.New("hostd: migration failed")

// MigrationError is a migration's failure as the daemon reported it. It
// wraps ErrMigrationFailed and the orchestrator's error for its outcome,
// if it has one (orchestrator.ErrRolledBack and the others), so that
// callers branch with errors.Is as they would on MigrateVM's error.
type MigrationError struct {
	Outcome string // one of the Outcome constants
	Reason  string // the daemon's error text
}

func (e *MigrationError) Error() string { return ErrMigrationFailed.Error() + ": " + e.Reason }

func (e *MigrationError) Unwrap() []error {
	errs := []error{ErrMigrationFailed}
	for _, o := range outcomeErrors {
		if o.outcome == e.Outcome {
			errs = append(errs, o.err)
		}
	}
	return errs
}

// Migrate migrates a VM, calling progress for each snapshot, and returns
// the report. It waits as long as the migration takes. A migration that
// fails is a *MigrationError.
func (c *Client) Migrate(ctx context.Context, name string, req MigrateRequest, progress func(orchestrator.Progress)) (orchestrator.Report, error) {
	return c.migrate(ctx, name, req, func(e MigrateEvent) {
		if e.Progress != nil && progress != nil {
			progress(*e.Progress)
		}
	})
}

// migrate sends a migration request and reads its answer's lines, each
// seen by see, until the last.
func (c *Client) migrate(ctx context.Context, name string, req MigrateRequest, see func(MigrateEvent)) (orchestrator.Report, error) {
	p, err := namePath("/v1/vms/", name, "/migrate")
	if err != nil {
		return orchestrator.Report{}, err
	}
	b, err := json.Marshal(req)
	if err != nil {
		return orchestrator.Report{}, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://gmigd"+p, bytes.NewReader(b))
	if err != nil {
		return orchestrator.Report{}, err
	}
	resp, err := c.send(hr)
	if err != nil {
		return orchestrator.Report{}, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var e MigrateEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return orchestrator.Report{}, fmt.Errorf("hostd: migrate %s: malformed answer line: %w", name, err)
		}
		see(e)
		switch {
		case e.Progress != nil:
		case e.Error != "":
			var rep orchestrator.Report
			if e.Report != nil {
				rep = *e.Report
			}
			return rep, &MigrationError{Outcome: e.Outcome, Reason: e.Error}
		case e.Report != nil, e.Check != nil:
			var rep orchestrator.Report
			if e.Report != nil {
				rep = *e.Report
			}
			return rep, nil
		}
	}
	if err := sc.Err(); err != nil {
		return orchestrator.Report{}, fmt.Errorf("hostd: migrate %s: %w", name, err)
	}
	return orchestrator.Report{}, fmt.Errorf("hostd: migrate %s: the daemon ended its answer without a report", name)
}
