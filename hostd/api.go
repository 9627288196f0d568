package hostd

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/gmig-dev/gmig/hostd/qemu"
	"github.com/gmig-dev/gmig/internal/vgpu"
	"github.com/gmig-dev/gmig/precopy"
)

// The control API (docs/operator-guide.md): JSON over HTTP on a UNIX socket.
//
//	GET    /v1/vgpus                list
//	POST   /v1/vgpus                create   {"name": "...", "mem_size": N, "gtt_entries": N}
//	GET    /v1/vgpus/{name}         describe
//	DELETE /v1/vgpus/{name}         destroy
//	GET    /v1/vms                  list VMs
//	POST   /v1/vms                  start a QEMU VM with a vGPU (StartVMRequest)
//	GET    /v1/vms/{name}           describe
//	DELETE /v1/vms/{name}           stop (an adopted VM is only released)
//	POST   /v1/vms/{name}/adopt     adopt a running QEMU  {"qmp": "/path", "vgpu": "gpu0"}
//	POST   /v1/vms/{name}/migrate   migrate (MigrateRequest); the answer streams
//	                                JSON lines: {"progress": ...} while it runs,
//	                                then {"report": ...} or {"error": ..., "report": ...}
//
// Errors are {"error": "..."} with 400 (bad request), 404, 409 or 500.

// CreateRequest is the body of POST /v1/vgpus.
type CreateRequest struct {
	Name       string `json:"name"`
	MemSize    uint64 `json:"mem_size,omitempty"`
	GTTEntries uint32 `json:"gtt_entries,omitempty"`
	// Backend runs the vGPU's commands: "software" (the default) or
	// "cuda" (an NVIDIA GPU; docs/nvidia.md).
	Backend string `json:"backend,omitempty"`
	// GuestModules lets the guest load its own PTX (cuda only; read
	// docs/nvidia.md, "Isolation", first).
	GuestModules bool `json:"guest_modules,omitempty"`
}

// maxRequestBody bounds what the API reads from a request.
const maxRequestBody = 1 << 16

// Handler returns the control API's HTTP handler.
func (h *Host) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/vgpus", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, h.List())
	})
	mux.HandleFunc("POST /v1/vgpus", func(w http.ResponseWriter, r *http.Request) {
		var req CreateRequest
		if err := decodeBody(r, &req); err != nil {
			writeError(w, err)
			return
		}
		info, err := h.Create(vgpu.Config{Name: req.Name, MemSize: req.MemSize, GTTEntries: req.GTTEntries,
			Backend: req.Backend, GuestModules: req.GuestModules})
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusCreated, info)
	})
	mux.HandleFunc("GET /v1/vgpus/{name}", func(w http.ResponseWriter, r *http.Request) {
		info, err := h.Get(r.PathValue("name"))
		if err != nil {
			writeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, info)
	})
	mux.HandleFunc("DELETE /v1/vgpus/{name}", func(w http.ResponseWriter, r *http.Request) {
		if err := h.Destroy(r.PathValue("name")); err != nil {
			writeError(w, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	h.vmRoutes(mux)
	return mux
}

// decodeBody decodes a JSON request body into v, refusing unknown fields.
func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxRequestBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", errBadRequest, err)
	}
	return nil
}

var errBadRequest = errors.New("hostd: bad request")

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, err error) {
	code := http.StatusInternalServerError
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrNoVM):
		code = http.StatusNotFound
	case errors.Is(err, ErrExists), errors.Is(err, ErrVMExists), errors.Is(err, ErrVMState):
		code = http.StatusConflict
	case errors.Is(err, ErrName), errors.Is(err, vgpu.ErrConfig), errors.Is(err, errBadRequest),
		errors.Is(err, qemu.ErrMachine), errors.Is(err, qemu.ErrSharedMemory), errors.Is(err, qemu.ErrAdopt),
		errors.Is(err, precopy.ErrStrategy):
		code = http.StatusBadRequest
	}
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

// ListenAPI opens the control socket at path, replacing a stale one. The
// socket is 0600 and owned by this process's user whatever the umask: it
// is bound inside a private (0700) directory, made 0600 there and only
// then renamed into place, so no other user can connect at any moment. It
// is checked after the rename; closing the listener removes it.
func (h *Host) ListenAPI(path string) (net.Listener, error) {
	if err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(filepath.Dir(path)); err == nil && fi.Mode().Perm()&0o002 != 0 {
		h.log.Warn().Str("dir", filepath.Dir(path)).Str("mode", fi.Mode().Perm().String()).
			Msg("the control socket's directory is writable by all users: another user could replace the socket")
	}
	l, err := listenPrivate(path)
	if err != nil {
		return nil, fmt.Errorf("hostd: control socket: %w", err)
	}
	h.log.Info().Str("socket", path).Str("mode", "0600").Msg("control API listening")
	return l, nil
}

// ServeAPI serves the control API on l until ctx ends.
func (h *Host) ServeAPI(ctx context.Context, l net.Listener) error {
	srv := &http.Server{Handler: h.Handler(), ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("hostd: control API: %w", err)
	}
	return nil
}

// Client talks to a gmigd control socket.
type Client struct {
	http    *http.Client
	timeout time.Duration // each request but a migration's
}

// NewClient returns a client for the control socket at path.
func NewClient(path string) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}}
	return &Client{http: &http.Client{Transport: tr}, timeout: 60 * time.Second}
}

// List lists the vGPUs.
func (c *Client) List() ([]Info, error) {
	var out []Info
	return out, c.do(http.MethodGet, "/v1/vgpus", nil, &out)
}

// Create creates a vGPU.
func (c *Client) Create(req CreateRequest) (Info, error) {
	var out Info
	return out, c.do(http.MethodPost, "/v1/vgpus", req, &out)
}

// Get describes a vGPU.
func (c *Client) Get(name string) (Info, error) {
	var out Info
	return out, c.do(http.MethodGet, "/v1/vgpus/"+name, nil, &out)
}

// Destroy destroys a vGPU.
func (c *Client) Destroy(name string) error {
	return c.do(http.MethodDelete, "/v1/vgpus/"+name, nil, nil)
}

func (c *Client) do(method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://gmigd"+path, body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("hostd: %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		var e struct{ Error string }
		_ = json.NewDecoder(io.LimitReader(resp.Body, maxRequestBody)).Decode(&e)
		return fmt.Errorf("hostd: %s %s: %s: %s", method, path, resp.Status, e.Error)
	}
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
