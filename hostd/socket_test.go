package hostd

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
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
		if e.Name() != "gmigd.sock" && e.Name() != "migrations" {
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
