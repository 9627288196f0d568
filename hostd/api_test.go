package hostd

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/hostd/qemu"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/orchestrator"
)

// serveTestAPI serves h's control API with timeouts t on a socket in its
// run directory until the test ends, and returns the socket's path.
func serveTestAPI(t *testing.T, h *Host, to apiTimeouts) string {
	t.Helper()
	sock := filepath.Join(h.cfg.RunDir, "gmigd.sock")
	l, err := h.ListenAPI(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.serveAPI(ctx, l, to) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return sock
}

// TestAPIRefusesBadInput: data after the JSON value, a GTT that cannot
// map the vGPU's memory, negative sizes, counts and rates are refused
// with 400, and nothing is created.
func TestAPIRefusesBadInput(t *testing.T) {
	h := newHost(t)
	for _, c := range []struct{ method, path, body string }{
		{http.MethodPost, "/v1/vgpus", `{"name":"a","mem_size":1048576} {"name":"y"}`},
		{http.MethodPost, "/v1/vgpus", `{"name":"b","mem_size":1048576}garbage`},
		{http.MethodPost, "/v1/vgpus", `{"name":"c","mem_size":1048576}}`},
		{http.MethodPost, "/v1/vgpus", `{"name":"d","mem_size":1048576,"gtt_entries":1}`},
		{http.MethodPost, "/v1/vgpus", `{"name":"e","mem_size":4194304,"gtt_entries":1023}`},
		{http.MethodPost, "/v1/vms", `{"name":"v1","qemu":{}} x`},
		{http.MethodPost, "/v1/vms", `{"name":"v2","vgpu_gtt_entries":1,"qemu":{}}`},
		{http.MethodPost, "/v1/vms", `{"name":"v3","qemu":{"memory_mb":-1}}`},
		{http.MethodPost, "/v1/vms", `{"name":"v4","qemu":{"cpus":-2}}`},
		{http.MethodPost, "/v1/vms/x/migrate", `{"to":"h:1","background_rate":-1}`},
		{http.MethodPost, "/v1/vms/x/migrate", `{"to":"h:1","downtime_limit_ms":-5}`},
		{http.MethodPost, "/v1/vms/x/migrate", `{"to":"h:1"}{}`},
	} {
		rec := httptest.NewRecorder()
		h.Handler().ServeHTTP(rec, httptest.NewRequest(c.method, c.path, strings.NewReader(c.body)))
		if rec.Code != http.StatusBadRequest {
			t.Errorf("%s %s %s: status %d, want 400: %s", c.method, c.path, c.body, rec.Code, rec.Body)
		}
	}
	if len(h.List()) != 0 || len(h.ListVMs()) != 0 {
		t.Fatalf("bad input created %+v %+v", h.List(), h.ListVMs())
	}
	// The smallest GTT that maps all of a 4 MiB vGPU is accepted.
	rec := httptest.NewRecorder()
	h.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/vgpus", strings.NewReader(`{"name":"x","mem_size":4194304,"gtt_entries":1024}`)))
	if rec.Code != http.StatusCreated {
		t.Fatalf("a GTT of 1024 entries for 4 MiB: status %d: %s", rec.Code, rec.Body)
	}
}

// TestAPIStatusCodes: a pool with no room is 507 and a host without QEMU
// is 503 (not 500), with nothing left behind.
func TestAPIStatusCodes(t *testing.T) {
	h := newHostWith(t, Config{PoolSize: 4 << 20, QEMURoot: "/nonexistent-qemu-root"})
	do := func(path, body string) int {
		rec := httptest.NewRecorder()
		h.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, path, strings.NewReader(body)))
		return rec.Code
	}
	if code := do("/v1/vms", `{"name":"vm1","vgpu_mem_size":1048576,"qemu":{"accel":"tcg"}}`); code != http.StatusServiceUnavailable {
		t.Errorf("starting a VM without QEMU: status %d, want 503", code)
	}
	if len(h.List()) != 0 || len(h.ListVMs()) != 0 {
		t.Fatalf("a VM that could not start left %+v %+v", h.List(), h.ListVMs())
	}
	if code := do("/v1/vgpus", `{"name":"a","mem_size":4194304}`); code != http.StatusCreated {
		t.Fatalf("filling the pool: status %d", code)
	}
	if code := do("/v1/vgpus", `{"name":"b","mem_size":1048576}`); code != http.StatusInsufficientStorage {
		t.Errorf("a vGPU in a full pool: status %d, want 507", code)
	}
	if code := do("/v1/vms", `{"name":"vm2","vgpu_mem_size":1048576,"qemu":{"accel":"tcg"}}`); code != http.StatusInsufficientStorage {
		t.Errorf("a VM whose vGPU does not fit: status %d, want 507", code)
	}
	if l := h.List(); len(l) != 1 || len(h.ListVMs()) != 0 {
		t.Fatalf("after the refusals: %+v %+v", l, h.ListVMs())
	}
}

// TestAPITimeouts: the control API closes a connection whose request
// stalls half-sent and one left idle between requests.
func TestAPITimeouts(t *testing.T) {
	h := newHost(t)
	sock := serveTestAPI(t, h, apiTimeouts{header: time.Second, read: 200 * time.Millisecond, idle: 200 * time.Millisecond})
	// open connects and sends req.
	open := func(req string) (net.Conn, *bufio.Reader) {
		c, err := net.Dial("unix", sock)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		fmt.Fprint(c, req)
		return c, bufio.NewReader(c)
	}
	// closedByServer waits, at most far longer than the timeouts, for the
	// server to end c.
	closedByServer := func(c net.Conn, r *bufio.Reader) error {
		_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
		_, err := io.ReadAll(r)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return errors.New("the server kept the connection open")
		}
		return nil
	}
	// A body that never arrives in full.
	if err := closedByServer(open("POST /v1/vgpus HTTP/1.1\r\nHost: gmigd\r\nContent-Length: 100\r\n\r\n{\"na")); err != nil {
		t.Errorf("a stalled request body: %v", err)
	}
	// A kept-alive connection, idle after its first request.
	c2, r2 := open("GET /v1/vgpus HTTP/1.1\r\nHost: gmigd\r\n\r\n")
	resp, err := http.ReadResponse(r2, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Close {
		t.Fatalf("first request: %s, close %v", resp.Status, resp.Close)
	}
	if err := closedByServer(c2, r2); err != nil {
		t.Errorf("an idle connection: %v", err)
	}
}

// TestAPIMigrateOutcome: a migration's last answer line names its
// outcome, and the client's error wraps the orchestrator's error for it:
// one that rolls back (no peer) through the API, and each outcome error
// as the orchestrator wraps it.
func TestAPIMigrateOutcome(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sims := &sim.Registry{}
	src := newMigHost(t, ctx, sims, false)
	startSimVM(t, ctx, src, sims, 1<<20)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := l.Addr().String()
	l.Close()
	c := NewClient(serveTestAPI(t, src.Host, defaultAPITimeouts))
	_, err = c.Migrate(ctx, "vm", MigrateRequest{To: gone}, nil)
	var merr *MigrationError
	if !errors.As(err, &merr) || merr.Outcome != OutcomeRolledBack || !errors.Is(err, orchestrator.ErrRolledBack) || !errors.Is(err, ErrMigrationFailed) {
		t.Fatalf("migrating to no peer: %v (%#v), want outcome %s wrapping orchestrator.ErrRolledBack", err, merr, OutcomeRolledBack)
	}
	if vi, err := src.GetVM("vm"); err != nil || vi.State != vmRunning {
		t.Fatalf("after the roll-back the VM is %+v (%v)", vi, err)
	}
	cause := errors.New("cause")
	for _, o := range []struct {
		err      error
		want     string
		sentinel error // what the client's error for the outcome wraps
	}{
		{nil, OutcomeMigrated, nil},
		{fmt.Errorf("%w: prepare: %w", orchestrator.ErrRolledBack, cause), OutcomeRolledBack, orchestrator.ErrRolledBack},
		{fmt.Errorf("%w: commit: %w; resuming it: %w", orchestrator.ErrNotResumed, cause, cause), OutcomeNotResumed, orchestrator.ErrNotResumed},
		{fmt.Errorf("%w: %w", orchestrator.ErrOutcomeUnknown, cause), OutcomeUnknown, orchestrator.ErrOutcomeUnknown},
		{fmt.Errorf("%w: vm is migrating", ErrVMState), OutcomeNotStarted, nil},
	} {
		got := MigrationOutcome(o.err)
		if got != o.want {
			t.Errorf("%v: outcome %q, want %q", o.err, got, o.want)
		}
		if o.sentinel != nil && !errors.Is(&MigrationError{Outcome: got}, o.sentinel) {
			t.Errorf("the client's error for outcome %q does not wrap %v", got, o.sentinel)
		}
	}
}

// TestAPIVMAccel: a VM's listing names its accelerator. It needs the
// provisioned QEMU root (GMIG_CACHE).
func TestAPIVMAccel(t *testing.T) {
	cache := os.Getenv("GMIG_CACHE")
	if cache == "" {
		t.Skip("GMIG_CACHE is not set: no QEMU root")
	}
	h := newHostWith(t, Config{QEMURoot: qemu.Root(filepath.Join(cache, "qemu-root"))})
	info, err := h.StartVM(t.Context(), StartVMRequest{Name: "vm1", MemSize: 1 << 20, QEMU: qemu.Spec{Accel: "tcg", MemoryMB: 64}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.StopVM("vm1")
	if info.Accel != "tcg" {
		t.Fatalf("started %+v, want accel tcg", info)
	}
	if vms := h.ListVMs(); len(vms) != 1 || vms[0].Accel != "tcg" {
		t.Fatalf("listed %+v", vms)
	}
}
