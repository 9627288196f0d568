package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/vgpu"
)

// runCLI runs gmigd's command line args in process and returns its exit
// status and what it wrote on stdout and stderr.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	capture := func(f **os.File) (restore func() string) {
		r, w, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		old := *f
		*f = w
		out := make(chan string)
		go func() {
			b, _ := io.ReadAll(r)
			out <- string(b)
		}()
		return func() string {
			*f = old
			w.Close()
			return <-out
		}
	}
	endOut, endErr := capture(&os.Stdout), capture(&os.Stderr)
	code = run(args)
	return code, endOut(), endErr()
}

// fakeDaemon is a control socket in a run directory of its own that
// answers with the handlers it is given and records what it was asked.
type fakeDaemon struct {
	dir  string
	mu   sync.Mutex
	reqs []string // "METHOD PATH BODY"
}

func newFakeDaemon(t *testing.T, routes map[string]http.HandlerFunc) *fakeDaemon {
	t.Helper()
	d := &fakeDaemon{dir: t.TempDir()}
	l, err := net.Listen("unix", filepath.Join(d.dir, "gmigd.sock"))
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	for pattern, h := range routes {
		mux.HandleFunc(pattern, h)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		d.mu.Lock()
		d.reqs = append(d.reqs, strings.TrimSpace(r.Method+" "+r.URL.Path+" "+string(body)))
		d.mu.Unlock()
		r.Body = io.NopCloser(strings.NewReader(string(body)))
		mux.ServeHTTP(w, r)
	}))
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return d
}

// requests returns what the daemon was asked so far.
func (d *fakeDaemon) requests() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.reqs)
}

// answer returns a handler that writes body with status code.
func answer(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		fmt.Fprintln(w, body)
	}
}

// TestHelpExitsZero: -h and --help print the command's usage on stdout
// and exit 0, for every command and every vm and vgpu command, and send
// nothing to the daemon (`vm start -h` used to ask for a VM named "-h").
func TestHelpExitsZero(t *testing.T) {
	d := newFakeDaemon(t, map[string]http.HandlerFunc{"/": answer(http.StatusOK, `{}`)})
	var lines [][]string
	for name := range commands {
		lines = append(lines, []string{name, "-h"})
	}
	for sub := range vmCommands {
		lines = append(lines, []string{"vm", sub, "-h", "-run-dir", d.dir}, []string{"vm", "-run-dir", d.dir, sub, "--help"})
	}
	for sub := range vgpuCommands {
		lines = append(lines, []string{"vgpu", sub, "x", "--help", "-run-dir", d.dir})
	}
	lines = append(lines, []string{"help", "migrate"}, []string{"-h"}, []string{"vm", "-h"})
	for _, args := range lines {
		code, out, errOut := runCLI(t, args...)
		if code != exitOK {
			t.Errorf("gmigd %q: exit %d, want 0\n%s", args, code, errOut)
			continue
		}
		if !strings.HasPrefix(strings.ToLower(out), "usage") || errOut != "" {
			t.Errorf("gmigd %q: stdout %.40q, stderr %q; want the usage on stdout alone", args, out, errOut)
		}
	}
	if r := d.requests(); len(r) != 0 {
		t.Fatalf("help reached the daemon: %q", r)
	}
}

// TestBadCommandLineExitsUsage: an unknown flag, a missing or extra
// argument or a value refused before anything is sent prints the error and
// the usage on stderr and exits 2, with nothing asked of the daemon.
func TestBadCommandLineExitsUsage(t *testing.T) {
	d := newFakeDaemon(t, map[string]http.HandlerFunc{"/": answer(http.StatusOK, `{}`)})
	for _, args := range [][]string{
		{"vm", "list", "-bogus"},
		{"vm", "start", "vm1", "-nope"},
		{"vm", "start"},
		{"vm", "start", "vm1", "vm2"},
		{"vm", "start", "vm1", "-mem", "0"},
		{"vm", "start", "vm1", "-mem", "100K"},
		{"vm", "start", "vm1", "-cpus", "0"},
		{"vm", "start", "vm1", "-vgpu-mem", "0"},
		{"vm", "show"},
		{"vm", "frob"},
		{"vm"},
		{"vgpu", "create", "g", "-mem", "0"},
		{"vgpu", "rm", "a", "b"},
		{"migrate", "vm1"},
		{"migrate", "--to", "h:1"},
		{"migrate", "vm1", "--to", "h:1", "-background-rate", "-1"},
		{"migrate", "vm1", "--to", "h:1", "-strategy", "fast"},
		{"serve", "-pool", "0"},
		{"serve", "stray"},
		{"certs", "-out", "x"},
		{"version", "extra"},
		{"nosuch"},
	} {
		if slices.Contains([]string{"vm", "vgpu", "migrate", "serve"}, args[0]) {
			args = append(args, "-run-dir", d.dir)
		}
		code, out, errOut := runCLI(t, args...)
		if code != exitUsage || out != "" || !strings.Contains(errOut, "usage") {
			t.Errorf("gmigd %q: exit %d, stdout %q, stderr %q; want 2 and the usage on stderr", args, code, out, errOut)
		}
	}
	if r := d.requests(); len(r) != 0 {
		t.Fatalf("a refused command line reached the daemon: %q", r)
	}
}

// TestFlagsAnywhere: flags come before, between or after the arguments,
// -run-dir after `vm`'s and `vgpu`'s command too, and "--" ends them (vm
// start's extra QEMU arguments).
func TestFlagsAnywhere(t *testing.T) {
	d := newFakeDaemon(t, map[string]http.HandlerFunc{
		"GET /v1/vms":    answer(http.StatusOK, `[]`),
		"POST /v1/vms":   answer(http.StatusCreated, `{"name":"vm1"}`),
		"POST /v1/vgpus": answer(http.StatusCreated, `{"name":"g"}`),
	})
	for _, args := range [][]string{
		{"vm", "list", "-run-dir", d.dir},
		{"vm", "start", "-mem", "1G", "vm1", "-run-dir=" + d.dir, "--cpus", "2", "--", "-drive", "file=x"},
		{"vgpu", "create", "g", "-mem", "8M", "-run-dir", d.dir},
		{"vgpu", "-run-dir", d.dir, "create", "-mem=8M", "g"},
	} {
		if code, _, errOut := runCLI(t, args...); code != exitOK {
			t.Fatalf("gmigd %q: exit %d\n%s", args, code, errOut)
		}
	}
	want := []string{
		"GET /v1/vms",
		`POST /v1/vms {"name":"vm1","vgpu_mem_size":67108864,"vgpu_backend":"software","qemu":{"machine":"pc","memory_mb":1024,"cpus":2,"extra":["-drive","file=x"]}}`,
		`POST /v1/vgpus {"name":"g","mem_size":8388608,"backend":"software"}`,
		`POST /v1/vgpus {"name":"g","mem_size":8388608,"backend":"software"}`,
	}
	if got := d.requests(); !slices.Equal(got, want) {
		t.Fatalf("the daemon was asked\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestNoDaemonOneSentence: a run directory without a daemon is one line
// that names the socket and says what to do, not a dial error.
func TestNoDaemonOneSentence(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "gmigd.sock")
	for _, c := range []struct {
		cmd  string // what the message starts with
		args []string
	}{
		{"gmigd vm list: ", []string{"vm", "list"}},
		{"gmigd vgpu rm: ", []string{"vgpu", "rm", "g"}},
		{"gmigd migrate: ", []string{"migrate", "vm1", "--to", "h:1"}},
	} {
		code, _, errOut := runCLI(t, append(c.args, "-run-dir", dir)...)
		if code != exitFailed || strings.Count(errOut, "\n") != 1 || !strings.HasPrefix(errOut, c.cmd) ||
			!strings.Contains(errOut, "no gmigd answers on "+sock) ||
			!strings.Contains(errOut, "gmigd serve") || strings.Contains(errOut, "dial") || strings.Contains(errOut, "http") {
			t.Errorf("gmigd %q without a daemon: exit %d, stderr %q", c.args, code, errOut)
		}
	}
}

// TestVersion: gmigd version prints one line with the Go version.
func TestVersion(t *testing.T) {
	code, out, _ := runCLI(t, "version")
	if code != exitOK || !strings.HasPrefix(out, "gmigd ") || strings.Count(out, "\n") != 1 || !strings.Contains(out, runtime.Version()) {
		t.Fatalf("gmigd version: exit %d, %q", code, out)
	}
}

// TestListColumns: vm list shows each VM's accelerator, vgpu list each
// vGPU's state.
func TestListColumns(t *testing.T) {
	d := newFakeDaemon(t, map[string]http.HandlerFunc{
		"GET /v1/vms":   answer(http.StatusOK, `[{"name":"vm1","kind":"qemu","state":"running","vgpu":"vm1","machine":"q35","accel":"tcg"}]`),
		"GET /v1/vgpus": answer(http.StatusOK, `[{"name":"g","state":"migrating","mem_size":1048576,"backend":"software"}]`),
	})
	for _, c := range []struct {
		args         []string
		column, cell string
	}{
		{[]string{"vm", "list"}, "ACCEL", "tcg"},
		{[]string{"vgpu", "list"}, "STATE", "migrating"},
	} {
		code, out, errOut := runCLI(t, append(c.args, "-run-dir", d.dir)...)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != exitOK || len(lines) != 2 || !slices.Contains(strings.Fields(lines[0]), c.column) ||
			!slices.Contains(strings.Fields(lines[1]), c.cell) {
			t.Errorf("gmigd %q: exit %d\n%s%s", c.args, code, out, errOut)
		}
	}
}

// TestMigrateExitStatus: gmigd migrate's exit status is the migration's
// outcome as the daemon's answer names it, and --json's last line carries
// it.
func TestMigrateExitStatus(t *testing.T) {
	for _, c := range []struct {
		outcome string
		last    string // the answer's last line
		code    int
	}{
		{"migrated", `{"report":{"id":"m1"},"outcome":"migrated"}`, exitOK},
		{"rolled-back", `{"report":{"id":"m1"},"error":"orchestrator: migration failed; the VM runs on at the source: prepare: refused","outcome":"rolled-back"}`, exitRolledBack},
		{"not-resumed", `{"report":{"id":"m1"},"error":"orchestrator: migration failed and the VM could not be resumed at the source","outcome":"not-resumed"}`, exitNotResumed},
		{"unknown", `{"report":{"id":"m1"},"error":"orchestrator: migration outcome unknown; the VM stays paused at the source","outcome":"unknown"}`, exitOutcomeUnknown},
		{"not-started", `{"report":{},"error":"hostd: the VM's state does not allow it: vm1 is migrating","outcome":"not-started"}`, exitFailed},
	} {
		d := newFakeDaemon(t, map[string]http.HandlerFunc{
			"POST /v1/vms/vm1/migrate": answer(http.StatusOK, `{"progress":{"phase":"prepare"}}`+"\n"+c.last),
		})
		code, _, errOut := runCLI(t, "migrate", "vm1", "--to", "10.0.0.2:7010", "-run-dir", d.dir)
		if code != c.code {
			t.Errorf("%s: exit %d, want %d\n%s", c.outcome, code, c.code, errOut)
		}
		code, out, _ := runCLI(t, "migrate", "--json", "-run-dir", d.dir, "vm1", "--to", "10.0.0.2:7010")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		var last struct{ Outcome string }
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &last); err != nil || last.Outcome != c.outcome || code != c.code {
			t.Errorf("%s: --json exit %d, last line %q (%v)", c.outcome, code, lines[len(lines)-1], err)
		}
	}
}

// TestMigrateRolledBackExitStatus: against a real daemon, a migration to
// a peer that is not there rolls back and gmigd migrate exits 3.
func TestMigrateRolledBackExitStatus(t *testing.T) {
	dir := t.TempDir()
	h, err := hostd.New(hostd.Config{PoolSize: 4 << 20, RunDir: dir, Log: zerolog.Nop(), Sims: &sim.Registry{}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	info, err := h.Create(vgpu.Config{Name: "vm1", MemSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	vm, err := sim.StartVM(info.Socket, 1, guest.WorkloadConfig{MemSize: 1 << 20}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	if err := h.AddSimVM("vm1", "vm1", vm, nil); err != nil {
		t.Fatal(err)
	}
	l, err := h.ListenAPI(filepath.Join(dir, "gmigd.sock"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- h.ServeAPI(ctx, l) }()
	defer func() { cancel(); <-served }()
	nobody, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := nobody.Addr().String()
	nobody.Close()
	code, _, errOut := runCLI(t, "migrate", "vm1", "--to", gone, "-run-dir", dir)
	if code != exitRolledBack || !strings.Contains(errOut, "runs on at the source") {
		t.Fatalf("exit %d, want %d: %s", code, exitRolledBack, errOut)
	}
}
