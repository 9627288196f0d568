package hostd

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/gmig-dev/gmig/hostd/qemu"
	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/vgpu"
)

// TestControlSocketPrivate: the control socket is 0600 and this user's
// even under umask 0, nothing of its making is left beside it, it serves,
// and closing removes it.
func TestControlSocketPrivate(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	h := newHost(t)
	sock := filepath.Join(h.cfg.RunDir, "gmigd.sock")
	l, err := h.ListenAPI(sock)
	if err != nil {
		t.Fatal(err)
	}
	syscall.Umask(old)
	fi, err := os.Lstat(sock)
	if err != nil {
		t.Fatal(err)
	}
	st := fi.Sys().(*syscall.Stat_t)
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 || st.Uid != uint32(os.Geteuid()) {
		t.Fatalf("control socket: mode %v, uid %d; want a socket, 0600, uid %d", fi.Mode(), st.Uid, os.Geteuid())
	}
	entries, err := os.ReadDir(h.cfg.RunDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		switch e.Name() {
		case "gmigd.sock", "migrations", lockFileName, vgpuDirName:
		default:
			t.Errorf("left in the run directory: %s", e.Name())
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.ServeAPI(ctx, l) }()
	if _, err := NewClient(sock).List(); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(sock); !os.IsNotExist(err) {
		t.Fatalf("after shutdown the socket is still there (%v)", err)
	}
	// A stale one (a killed daemon's) is replaced.
	l, err = h.ListenAPI(sock)
	if err != nil {
		t.Fatal(err)
	}
	l.(*privateListener).UnixListener.Close() // leaves the file, as a crash does
	if _, err := os.Lstat(sock); err != nil {
		t.Fatal(err)
	}
	if l, err = h.ListenAPI(sock); err != nil {
		t.Fatalf("over a stale socket: %v", err)
	}
	l.Close()
}

// serveAPI serves h's control API on RUN_DIR/gmigd.sock for the test's
// life and returns a client of it.
func serveAPI(t *testing.T, h *Host) (*Client, string) {
	t.Helper()
	sock := filepath.Join(h.cfg.RunDir, "gmigd.sock")
	l, err := h.ListenAPI(sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.ServeAPI(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return NewClient(sock), sock
}

// TestVGPUNamedGmigdKeepsControlSocket: a vGPU named gmigd — created, made
// by a failed `vm start gmigd`, or asked for by a migration peer's prepare
// — never takes the control socket's path (the vGPU sockets have a
// directory of their own); the control API answers a new connection after
// each (a kept-alive one would hide a socket file gone). A peer's name
// that is a path is refused before anything is made.
func TestVGPUNamedGmigdKeepsControlSocket(t *testing.T) {
	ways := map[string]func(t *testing.T, h *Host, sock string){
		"vgpu create": func(t *testing.T, h *Host, sock string) {
			info, err := NewClient(sock).Create(CreateRequest{Name: "gmigd", MemSize: 1 << 20})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := NewClient(sock).List(); err != nil {
				t.Fatalf("the control API with vGPU gmigd served at %s: %v", info.Socket, err)
			}
			if err := NewClient(sock).Destroy("gmigd"); err != nil {
				t.Fatal(err)
			}
		},
		"failed vm start": func(t *testing.T, h *Host, sock string) {
			_, err := NewClient(sock).StartVM(StartVMRequest{Name: "gmigd", MemSize: 1 << 20, QEMU: qemu.Spec{Accel: "tcg"}})
			if err == nil || !strings.Contains(err.Error(), qemu.ErrNoRoot.Error()) {
				t.Fatalf("vm start without a QEMU root: %v, want it refused for that (after its vGPU was made)", err)
			}
		},
		"peer's prepare": func(t *testing.T, h *Host, sock string) {
			via := &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 1}
			// The spec of a vGPU this host provides, as a source sends it.
			if _, err := h.Create(vgpu.Config{Name: "model", MemSize: 1 << 20}); err != nil {
				t.Fatal(err)
			}
			model, err := h.VGPU("model")
			if err != nil {
				t.Fatal(err)
			}
			spec := model.Spec()
			if err := h.Destroy("model"); err != nil {
				t.Fatal(err)
			}
			p := orchestrator.Prepare{ID: "0123456789abcdef", Name: "gmigd", VGPU: spec, VMKind: "none"}
			if _, err := h.Land(t.Context(), p, via); err == nil {
				t.Fatal("a landing of an unknown VM kind was taken")
			}
			p.Name = "../gmigd"
			if _, err := h.Land(t.Context(), p, via); !errors.Is(err, ErrName) {
				t.Fatalf("a peer's vGPU named %q: %v, want ErrName", p.Name, err)
			}
			if n := len(h.Pool().Partitions()); n != 0 {
				t.Fatalf("%d partitions left by refused landings", n)
			}
		},
	}
	for name, way := range ways {
		t.Run(name, func(t *testing.T) {
			h := newHostWith(t, Config{QEMURoot: qemu.Root(filepath.Join(t.TempDir(), "no-qemu"))})
			_, sock := serveAPI(t, h)
			way(t, h, sock)
			if _, err := NewClient(sock).List(); err != nil {
				t.Fatalf("the control API afterwards: %v", err)
			}
		})
	}
}

// TestLiveSocketNeverReplaced: a socket a server still answers on is not
// removed — neither the control socket of a running API nor a socket at a
// vGPU's path — and what listens there goes on answering.
func TestLiveSocketNeverReplaced(t *testing.T) {
	h := newHost(t)
	c, sock := serveAPI(t, h)
	if l, err := h.ListenAPI(sock); err == nil {
		l.Close()
		t.Fatal("a second control socket replaced a live one")
	} else if !errors.Is(err, ErrSocketInUse) {
		t.Fatalf("a second control socket: %v, want ErrSocketInUse", err)
	}
	if _, err := c.List(); err != nil {
		t.Fatalf("the first control API afterwards: %v", err)
	}
	other, err := net.Listen("unix", h.vgpuSocket("v"))
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if _, err := h.Create(vgpu.Config{Name: "v", MemSize: 1 << 20}); !errors.Is(err, ErrSocketInUse) {
		t.Fatalf("a vGPU over a live socket: %v, want ErrSocketInUse", err)
	}
	conn, err := net.Dial("unix", h.vgpuSocket("v"))
	if err != nil {
		t.Fatalf("the live socket after the refused create: %v", err)
	}
	conn.Close()
	if n := len(h.Pool().Partitions()); n != 0 {
		t.Fatalf("%d partitions left by the refused create", n)
	}
}
