package hostd

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/vfio"
	"github.com/gmig-dev/gmig/vgpu"
)

func newHost(t *testing.T) *Host {
	t.Helper()
	return newHostWith(t, Config{})
}

// newHostWith is newHost with cfg's hooks and pool size (16 MiB if
// unset); run dir and log are the test's.
func newHostWith(t *testing.T, cfg Config) *Host {
	t.Helper()
	if cfg.PoolSize == 0 {
		cfg.PoolSize = 16 << 20
	}
	cfg.RunDir, cfg.Log = t.TempDir(), zerolog.Nop()
	h, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

func TestCreateListDestroy(t *testing.T) {
	h := newHost(t)
	a, err := h.Create(vgpu.Config{Name: "a", MemSize: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.Create(vgpu.Config{Name: "b", MemSize: 4 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if a.PoolOffset == b.PoolOffset {
		t.Fatal("two vGPUs share a partition")
	}
	if fi, err := os.Stat(a.Socket); err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("socket %s: %v", a.Socket, err)
	}
	if _, err := h.Create(vgpu.Config{Name: "a"}); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate create: %v", err)
	}
	for _, bad := range []string{"", "../x", "A", strings.Repeat("x", 33)} {
		if _, err := h.Create(vgpu.Config{Name: bad}); !errors.Is(err, ErrName) {
			t.Errorf("name %q: %v", bad, err)
		}
	}
	if list := h.List(); len(list) != 2 || list[0].Name != "a" || list[1].Name != "b" {
		t.Fatalf("list = %+v", list)
	}
	if err := h.Destroy("a"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(a.Socket); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("socket left behind: %v", err)
	}
	if err := h.Destroy("a"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second destroy: %v", err)
	}
	if len(h.Pool().Partitions()) != 1 {
		t.Fatalf("partitions after destroy: %v", h.Pool().Partitions())
	}
}

func TestStaleSocketReplacedOtherFileRefused(t *testing.T) {
	h := newHost(t)
	path := h.vgpuSocket("c")
	if err := os.WriteFile(path, []byte("not a socket"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Create(vgpu.Config{Name: "c", MemSize: 1 << 20}); err == nil {
		t.Fatal("created over a regular file")
	}
	if len(h.Pool().Partitions()) != 0 {
		t.Fatal("failed create leaked a partition")
	}
}

func TestControlAPI(t *testing.T) {
	h := newHost(t)
	sock := filepath.Join(h.cfg.RunDir, "gmigd.sock")
	l, err := h.ListenAPI(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.ServeAPI(ctx, l) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	}()
	c := NewClient(sock)
	info, err := c.Create(CreateRequest{Name: "g0", MemSize: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if info.Name != "g0" || info.MemSize != 2<<20 {
		t.Fatalf("created %+v", info)
	}
	if _, err := c.Create(CreateRequest{Name: "g0"}); err == nil || !strings.Contains(err.Error(), "409") {
		t.Fatalf("duplicate: %v", err)
	}
	if _, err := c.Create(CreateRequest{Name: "g1", MemSize: 3 << 20}); err == nil || !strings.Contains(err.Error(), "400") {
		t.Fatalf("bad size: %v", err)
	}
	if got, err := c.Get("g0"); err != nil || got.Socket != info.Socket {
		t.Fatalf("get: %+v %v", got, err)
	}
	if err := c.Destroy("nope"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("destroy missing: %v", err)
	}
	if err := c.Destroy("g0"); err != nil {
		t.Fatal(err)
	}
	if list, err := c.List(); err != nil || len(list) != 0 {
		t.Fatalf("list after destroy: %v %v", list, err)
	}
}

func TestCreateRejectsGarbageBody(t *testing.T) {
	h := newHost(t)
	for _, body := range []string{"{", `{"name":"x","bogus":1}`, `[]`, strings.Repeat("x", 1<<17)} {
		rec := httptest.NewRecorder()
		h.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/vgpus", strings.NewReader(body)))
		if rec.Code != http.StatusBadRequest {
			t.Errorf("body %.20q: status %d, want 400", body, rec.Code)
		}
	}
	if len(h.List()) != 0 {
		t.Fatal("garbage created a vGPU")
	}
}

// TestNativeMigrationInterface checks that a vGPU's socket offers the
// vfio-user migration interface (what a QEMU whose client migrates would
// use), and that a native save and a gmigd migration exclude each other.
func TestNativeMigrationInterface(t *testing.T) {
	h := newHost(t)
	info, err := h.Create(vgpu.Config{Name: "n", MemSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	c, err := vfio.Dial(info.Socket)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	flags, err := c.MigrationFlags()
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(vfio.MigrationStopCopy | vfio.MigrationPreCopy); flags != want {
		t.Fatalf("migration flags %#x, want %#x", flags, want)
	}
	if err := c.SetMigState(vfio.MigStatePreCopy); err != nil {
		t.Fatal(err)
	}
	// A gmigd migration of a VM on that vGPU is refused while the native
	// save holds it; the VM runs on.
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// The socket's one client is the native save's: the VM is a simulated
	// one that never attaches (the migration fails before touching it).
	sims := &sim.Registry{}
	vm := new(sim.VM)
	sims.Put("n", vm)
	if err := h.AddSimVM("n", "n", vm, nil); err != nil {
		t.Fatal(err)
	}
	dst := newMigHost(t, ctx, sims, false)
	if _, err := h.MigrateVM(ctx, "n", dst.addr, MigrateOptions{}); !errors.Is(err, vgpu.ErrObserved) || !errors.Is(err, orchestrator.ErrRolledBack) {
		t.Fatalf("a gmigd migration during a native one: %v, want vgpu.ErrObserved and a roll-back", err)
	}
	if err := c.SetMigState(vfio.MigStateRunning); err != nil {
		t.Fatalf("abandoning the native save: %v", err)
	}
}
