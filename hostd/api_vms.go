package hostd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/precopy"
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
	Progress *orchestrator.Progress `json:"progress,omitempty"`
	Report   *orchestrator.Report   `json:"report,omitempty"`
	Error    string                 `json:"error,omitempty"`
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
	if req.To == "" {
		writeError(w, fmt.Errorf("%w: no destination (\"to\")", errBadRequest))
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
	rep, err := h.MigrateVM(ctx, name, req.To, MigrateOptions{
		Precopy:       precopy.Options{Strategy: strategy, BackgroundRate: req.BackgroundRate, VerifyWriteLog: req.VerifyTracking},
		NoTracking:    req.NoTracking,
		Progress:      func(p orchestrator.Progress) { send(MigrateEvent{Progress: &p}) },
		MaxBandwidth:  req.MaxBandwidthMB << 20,
		DowntimeLimit: time.Duration(req.DowntimeMS) * time.Millisecond,
	})
	ev := MigrateEvent{Report: &rep}
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
	var out VMInfo
	return out, c.do(http.MethodPost, "/v1/vms", req, &out)
}

// StopVM stops a VM.
func (c *Client) StopVM(name string) error {
	return c.do(http.MethodDelete, "/v1/vms/"+name, nil, nil)
}

// AdoptVM adopts a running QEMU.
func (c *Client) AdoptVM(name string, req AdoptRequest) (VMInfo, error) {
	var out VMInfo
	return out, c.do(http.MethodPost, "/v1/vms/"+name+"/adopt", req, &out)
}

// ErrMigrationFailed wraps a migration's error as the daemon reported it.
var ErrMigrationFailed = errors.New("hostd: migration failed")

// Migrate migrates a VM, calling progress for each snapshot, and returns
// the report. It waits as long as the migration takes.
func (c *Client) Migrate(ctx context.Context, name string, req MigrateRequest, progress func(orchestrator.Progress)) (orchestrator.Report, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return orchestrator.Report{}, err
	}
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://gmigd/v1/vms/"+name+"/migrate", bytes.NewReader(b))
	if err != nil {
		return orchestrator.Report{}, err
	}
	resp, err := c.http.Do(hr)
	if err != nil {
		return orchestrator.Report{}, fmt.Errorf("hostd: migrate %s: %w", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var e struct{ Error string }
		_ = json.NewDecoder(io.LimitReader(resp.Body, maxRequestBody)).Decode(&e)
		return orchestrator.Report{}, fmt.Errorf("hostd: migrate %s: %s: %s", name, resp.Status, e.Error)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var e MigrateEvent
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			return orchestrator.Report{}, fmt.Errorf("hostd: migrate %s: malformed answer line: %w", name, err)
		}
		switch {
		case e.Progress != nil:
			if progress != nil {
				progress(*e.Progress)
			}
		case e.Error != "":
			var rep orchestrator.Report
			if e.Report != nil {
				rep = *e.Report
			}
			return rep, fmt.Errorf("%w: %s", ErrMigrationFailed, e.Error)
		case e.Report != nil:
			return *e.Report, nil
		}
	}
	if err := sc.Err(); err != nil {
		return orchestrator.Report{}, fmt.Errorf("hostd: migrate %s: %w", name, err)
	}
	return orchestrator.Report{}, fmt.Errorf("hostd: migrate %s: the daemon ended its answer without a report", name)
}
