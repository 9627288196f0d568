package hostd

import (
	"errors"
	"net/http"

	"github.com/gmig-dev/gmig/orchestrator"
)

// The control API's table of migrations (docs/operator-guide.md,
// "Migrations in flight"):
//
//	GET  /v1/migrations                  list (Job): in flight, then the last ended, newest first
//	GET  /v1/migrations/{id}             describe; {id} is a migration ID or a VM's name
//	POST /v1/migrations/{id}/cancel      cancel before the commit (CancelRequest): 202 and the Job;
//	                                     409 once committed ("committed") or ended
//	POST /v1/migrations/{id}/bandwidth   change the limit (BandwidthRequest): 200 and the Job

// CancelRequest is the body of POST /v1/migrations/{id}/cancel.
type CancelRequest struct {
	Reason string `json:"reason,omitempty"` // in the migration's error ("" : "cancelled by the operator")
}

// BandwidthRequest is the body of POST /v1/migrations/{id}/bandwidth.
type BandwidthRequest struct {
	Bandwidth uint64 `json:"bandwidth"` // bytes/s for the vGPU stream and QEMU's RAM together; 0: none
}

func (h *Host) jobRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/migrations", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, h.Jobs())
	})
	mux.HandleFunc("GET /v1/migrations/{id}", func(w http.ResponseWriter, r *http.Request) {
		j, err := h.Job(r.PathValue("id"))
		if err != nil {
			writeJobError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, j)
	})
	mux.HandleFunc("POST /v1/migrations/{id}/cancel", func(w http.ResponseWriter, r *http.Request) {
		var req CancelRequest
		if err := decodeBody(r, &req); err != nil {
			writeError(w, err)
			return
		}
		if req.Reason == "" {
			req.Reason = "cancelled by the operator"
		}
		j, err := h.CancelJob(r.PathValue("id"), req.Reason)
		if err != nil {
			writeJobError(w, err)
			return
		}
		writeJSON(w, http.StatusAccepted, j)
	})
	mux.HandleFunc("POST /v1/migrations/{id}/bandwidth", func(w http.ResponseWriter, r *http.Request) {
		var req BandwidthRequest
		if err := decodeBody(r, &req); err != nil {
			writeError(w, err)
			return
		}
		j, err := h.SetJobBandwidth(r.PathValue("id"), req.Bandwidth)
		if err != nil {
			writeJobError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, j)
	})
}

// writeJobError answers a table-of-migrations error: 404 for no such
// migration, 409 for one that has ended or is committed (its error says
// "committed"), else as writeError.
func writeJobError(w http.ResponseWriter, err error) {
	switch {
	case errors.Is(err, ErrNoJob):
		writeJSON(w, http.StatusNotFound, map[string]string{"error": err.Error()})
	case errors.Is(err, orchestrator.ErrCommitted), errors.Is(err, ErrJobEnded):
		writeJSON(w, http.StatusConflict, map[string]string{"error": err.Error()})
	default:
		writeError(w, err)
	}
}

// Jobs lists the migrations from the daemon's host.
func (c *Client) Jobs() ([]Job, error) {
	var out []Job
	return out, c.do(http.MethodGet, "/v1/migrations", nil, &out)
}

// Job describes a migration by ID or VM name.
func (c *Client) Job(ref string) (Job, error) {
	return c.jobDo(http.MethodGet, ref, "", nil)
}

// CancelJob cancels a migration by ID or VM name before its commit.
func (c *Client) CancelJob(ref, reason string) (Job, error) {
	return c.jobDo(http.MethodPost, ref, "/cancel", CancelRequest{Reason: reason})
}

// SetJobBandwidth changes a migration's bandwidth limit (bytes/s; 0: none).
func (c *Client) SetJobBandwidth(ref string, bytesPerSec uint64) (Job, error) {
	return c.jobDo(http.MethodPost, ref, "/bandwidth", BandwidthRequest{Bandwidth: bytesPerSec})
}

// jobDo asks about the migration ref names (an ID or a VM name: both are
// names by CheckName, refused before any request if not).
func (c *Client) jobDo(method, ref, suffix string, in any) (Job, error) {
	p, err := namePath("/v1/migrations/", ref, suffix)
	if err != nil {
		return Job{}, err
	}
	var out Job
	return out, c.do(method, p, in, &out)
}
