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
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/hostd/qemu"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/precopy"
	"github.com/gmig-dev/gmig/vgpu"
)

// The control API (docs/operator-guide.md): JSON over HTTP on a UNIX socket.
//
//	GET    /v1/vgpus                list
//	POST   /v1/vgpus                create   {"name": "...", "mem_size": N, "gtt_entries": N}
//	GET    /v1/vgpus/{name}         describe
//	DELETE /v1/vgpus/{name}         destroy
//	GET    /v1/gpus                 the host's GPUs, their owners, this gmigd's (GPUReport)
//	GET    /v1/vms                  list VMs
//	POST   /v1/vms                  start a QEMU VM with a vGPU (StartVMRequest)
//	GET    /v1/vms/{name}           describe
//	DELETE /v1/vms/{name}           stop (an adopted VM is only released)
//	POST   /v1/vms/{name}/adopt     adopt a running QEMU  {"qmp": "/path", "vgpu": "gpu0"}
//	POST   /v1/vms/{name}/migrate   migrate (MigrateRequest); the answer streams
//	                                JSON lines: {"progress": ...} while it runs,
//	                                then {"report": ..., "outcome": ...} or
//	                                {"error": ..., "report": ..., "outcome": ...}
//	                                (outcome: MigrationOutcome); with "dry_run",
//	                                one line {"check": ...} and nothing moves
//	GET    /v1/migrations           migrations in flight and the last ended (api_jobs.go)
//	GET    /v1/migrations/{id}      one, by ID or VM name
//	POST   /v1/migrations/{id}/cancel     cancel before the commit
//	POST   /v1/migrations/{id}/bandwidth  change the bandwidth limit
//
// A request body is one JSON value: unknown fields and anything after it
// are refused. Errors are {"error": "..."} with 400 (bad request), 404 (no
// such vGPU or VM), 409 (exists, its state does not allow it, or the vGPU
// is held by a migration or used by a VM, with which), 503 (the host
// cannot do it: no QEMU installed, no KVM, no GPU for a cuda vGPU,
// shutting down), 507 (the pool has no room for the vGPU) or 500
// (anything else).

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
	// LocalMemSize is the vGPU's device-local memory in bytes (a multiple
	// of 4096; 0: none; docs/device-abi.md §1.3).
	LocalMemSize uint64 `json:"local_mem_size,omitempty"`
	// GPUIsolation is where a cuda vGPU's GPU context lives: "process"
	// (the default: a GPU worker process of its own) or "shared"
	// (gmigd's; docs/nvidia.md, "Isolation").
	GPUIsolation string `json:"gpu_isolation,omitempty"`
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
		if err := checkGTT(req.MemSize, req.GTTEntries); err != nil {
			writeError(w, err)
			return
		}
		info, err := h.Create(vgpu.Config{Name: req.Name, MemSize: req.MemSize, GTTEntries: req.GTTEntries,
			Backend: req.Backend, GuestModules: req.GuestModules, LocalMemSize: req.LocalMemSize, GPUIsolation: req.GPUIsolation})
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
	mux.HandleFunc("GET /v1/gpus", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, h.GPUs())
	})
	h.vmRoutes(mux)
	h.jobRoutes(mux)
	return mux
}

// decodeBody decodes a JSON request body into v: one JSON value of at most
// maxRequestBody bytes, without unknown fields, and nothing after it.
func decodeBody(r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(nil, r.Body, maxRequestBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", errBadRequest, err)
	}
	var more json.RawMessage
	if err := dec.Decode(&more); !errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: data after the JSON value", errBadRequest)
	}
	return nil
}

var errBadRequest = errors.New("hostd: bad request")

// checkGTT refuses a GTT (entries; 0: the default, abi.GTTMaxEntries) that
// cannot map all of a vGPU's graphics memory (mem bytes; 0: the default),
// or as much of it as the largest GTT can: memory no entry reaches is
// memory the guest's commands never can (docs/device-abi.md §3.1).
func checkGTT(mem uint64, entries uint32) error {
	if entries == 0 {
		return nil
	}
	if mem == 0 {
		mem = vgpu.DefaultMemSize
	}
	if want := min(mem/abi.PageSize, abi.GTTMaxEntries); uint64(entries) < want {
		return fmt.Errorf("%w: %d GTT entries map %d of the %d pages of graphics memory; want at least %d (or 0: %d)",
			errBadRequest, entries, entries, mem/abi.PageSize, want, abi.GTTMaxEntries)
	}
	return nil
}

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
	case errors.Is(err, ErrExists), errors.Is(err, ErrVMExists), errors.Is(err, ErrVMState), errors.Is(err, ErrBusy),
		errors.Is(err, ErrSocketInUse):
		code = http.StatusConflict
	case errors.Is(err, ErrName), errors.Is(err, vgpu.ErrConfig), errors.Is(err, errBadRequest),
		errors.Is(err, qemu.ErrMachine), errors.Is(err, qemu.ErrSharedMemory), errors.Is(err, qemu.ErrAdopt),
		errors.Is(err, precopy.ErrStrategy):
		code = http.StatusBadRequest
	case errors.Is(err, pool.ErrNoSpace):
		code = http.StatusInsufficientStorage // the request is fine; the pool has no room for it now
	case errors.Is(err, qemu.ErrNoRoot), errors.Is(err, qemu.ErrNoKVM), errors.Is(err, ErrClosed), errors.Is(err, ErrNoGPU):
		code = http.StatusServiceUnavailable // this host cannot run it (no QEMU, no KVM) or is shutting down
	}
	writeJSON(w, code, map[string]string{"error": err.Error()})
}

// ListenAPI opens the control socket at path, replacing a stale one (one
// no server answers on; a live one is ErrSocketInUse). The socket is 0600
// and owned by this process's user whatever the umask (bindSocket), so no
// other user can connect at any moment; closing the listener removes it.
func (h *Host) ListenAPI(path string) (net.Listener, error) {
	if _, err := removeStaleSocket(path); err != nil {
		return nil, err
	}
	if fi, err := os.Stat(filepath.Dir(path)); err == nil && fi.Mode().Perm()&0o002 != 0 {
		h.log.Warn().Str("dir", filepath.Dir(path)).Str("mode", fi.Mode().Perm().String()).
			Msg("the control socket's directory is writable by all users: another user could replace the socket")
	}
	l, fi, err := bindSocket(path, controlSocketMode)
	if err != nil {
		return nil, fmt.Errorf("hostd: control socket: %w", err)
	}
	h.log.Info().Str("socket", path).Str("mode", "0600").Msg("control API listening")
	return &privateListener{UnixListener: l, path: path, fi: fi}, nil
}

// apiTimeouts bound how long the control API waits on a client.
type apiTimeouts struct {
	header time.Duration // a request's header
	read   time.Duration // a whole request, body included
	idle   time.Duration // a kept-alive connection between requests
}

// defaultAPITimeouts: requests are at most maxRequestBody bytes over a
// local socket, so a client that takes seconds to send one is stuck or
// hostile; the CLI makes one request per command, so an idle connection
// is soon of no use. Nothing bounds writes: a migration's answer streams
// for as long as the migration runs.
var defaultAPITimeouts = apiTimeouts{header: 5 * time.Second, read: 10 * time.Second, idle: time.Minute}

// ServeAPI serves the control API on l until ctx ends.
func (h *Host) ServeAPI(ctx context.Context, l net.Listener) error {
	return h.serveAPI(ctx, l, defaultAPITimeouts)
}

func (h *Host) serveAPI(ctx context.Context, l net.Listener, t apiTimeouts) error {
	srv := &http.Server{Handler: h.Handler(), ReadHeaderTimeout: t.header, ReadTimeout: t.read, IdleTimeout: t.idle}
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

// ErrNoDaemon is a control socket no gmigd answers on: there is none, or
// the gmigd that made it has gone.
var ErrNoDaemon = errors.New("hostd: no gmigd answers")

// NewClient returns a client for the control socket at path.
func NewClient(path string) *Client {
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		c, err := d.DialContext(ctx, "unix", path)
		if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
			var se *os.SyscallError
			if errors.As(err, &se) {
				err = se.Err
			}
			return nil, fmt.Errorf("%w on %s (%v)", ErrNoDaemon, path, err)
		}
		return c, err
	}}
	return &Client{http: &http.Client{Transport: tr}, timeout: 60 * time.Second}
}

// send sends req and returns the answer, or the error of an answer that
// is not a success.
func (c *Client) send(req *http.Request) (*http.Response, error) {
	what := req.Method + " " + req.URL.Path
	resp, err := c.http.Do(req)
	if errors.Is(err, ErrNoDaemon) {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("hostd: %s: %w", what, err)
	}
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		var e struct{ Error string }
		_ = json.NewDecoder(io.LimitReader(resp.Body, maxRequestBody)).Decode(&e)
		return nil, fmt.Errorf("hostd: %s: %s: %s", what, resp.Status, e.Error)
	}
	return resp, nil
}

// List lists the vGPUs.
func (c *Client) List() ([]Info, error) {
	var out []Info
	return out, c.do(http.MethodGet, "/v1/vgpus", nil, &out)
}

// GPUs lists the host's GPUs, their owners and the daemon's own.
func (c *Client) GPUs() (GPUReport, error) {
	var out GPUReport
	return out, c.do(http.MethodGet, "/v1/gpus", nil, &out)
}

// Create creates a vGPU.
func (c *Client) Create(req CreateRequest) (Info, error) {
	if err := CheckName(req.Name); err != nil {
		return Info{}, err
	}
	var out Info
	return out, c.do(http.MethodPost, "/v1/vgpus", req, &out)
}

// Get describes a vGPU.
func (c *Client) Get(name string) (Info, error) {
	p, err := namePath("/v1/vgpus/", name, "")
	if err != nil {
		return Info{}, err
	}
	var out Info
	return out, c.do(http.MethodGet, p, nil, &out)
}

// Destroy destroys a vGPU.
func (c *Client) Destroy(name string) error {
	p, err := namePath("/v1/vgpus/", name, "")
	if err != nil {
		return err
	}
	return c.do(http.MethodDelete, p, nil, nil)
}

// namePath is the request path prefix+NAME+suffix for a vGPU's or VM's
// name: a name CheckName refuses is never sent, and the name is escaped as
// one path segment (so no name reaches another resource).
func namePath(prefix, name, suffix string) (string, error) {
	if err := CheckName(name); err != nil {
		return "", err
	}
	return prefix + url.PathEscape(name) + suffix, nil
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
	resp, err := c.send(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		return nil
	}
	return json.NewDecoder(resp.Body).Decode(out)
}
