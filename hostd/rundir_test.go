package hostd

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/vgpu"
)

// TestRunDirLocked: a second gmigd on a run directory in use fails at
// start-up, naming the directory and the first one's pid, and leaves the
// first one's control socket and vGPU sockets working; once the first has
// shut down the directory is free.
func TestRunDirLocked(t *testing.T) {
	dir := t.TempDir()
	cfg := Config{PoolSize: 16 << 20, RunDir: dir, Log: zerolog.Nop()}
	first, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	c, _ := serveAPI(t, first)
	info, err := first.Create(vgpu.Config{Name: "g0", MemSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	second, err := New(cfg)
	if err == nil {
		second.Close()
		t.Fatal("a second gmigd started on a run directory in use")
	}
	want := fmt.Sprintf("run dir %s is in use by another gmigd (pid %d)", dir, os.Getpid())
	if !errors.Is(err, ErrRunDirInUse) || !strings.Contains(err.Error(), want) {
		t.Fatalf("the second gmigd: %v, want ErrRunDirInUse saying %q", err, want)
	}
	if _, err := c.List(); err != nil {
		t.Fatalf("the first gmigd's control API: %v", err)
	}
	conn, err := net.Dial("unix", info.Socket)
	if err != nil {
		t.Fatalf("the first gmigd's vGPU socket: %v", err)
	}
	conn.Close()
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	third, err := New(cfg)
	if err != nil {
		t.Fatalf("a gmigd after the first shut down: %v", err)
	}
	third.Close()
}

// TestSocketModesExplicit: under umask 0 a vGPU's socket is still 0660
// and its directory 0750 (another user used to attach to a vGPU), in a
// directory of their own; a run directory others can reach is warned
// about. As root: in a set-group-ID run directory the socket gets the
// directory's group (the one a QEMU of another user connects through).
func TestSocketModesExplicit(t *testing.T) {
	old := syscall.Umask(0)
	defer syscall.Umask(old)
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777|os.ModeSetgid); err != nil {
		t.Fatal(err)
	}
	const gid = 4242 // any group but this process's
	asRoot := os.Geteuid() == 0
	if asRoot {
		if err := os.Chown(dir, -1, gid); err != nil {
			t.Fatal(err)
		}
	}
	var log lockedBuffer
	h, err := New(Config{PoolSize: 16 << 20, RunDir: dir, Log: zerolog.New(&log)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	info, err := h.Create(vgpu.Config{Name: "g0", MemSize: 1 << 20})
	syscall.Umask(old)
	if err != nil {
		t.Fatal(err)
	}
	fi, err := os.Lstat(info.Socket)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o660 {
		t.Errorf("vGPU socket %s: mode %v, want a socket, 0660", info.Socket, fi.Mode())
	}
	if st := fi.Sys().(*syscall.Stat_t); asRoot && st.Gid != gid {
		t.Errorf("vGPU socket's group %d in a set-group-ID run directory of group %d", st.Gid, gid)
	}
	sockDir := filepath.Dir(info.Socket)
	if di, err := os.Stat(sockDir); err != nil || di.Mode().Perm() != 0o750 || sockDir == dir {
		t.Errorf("vGPU socket directory %s: %v (%v), want 0750 and not the run directory", sockDir, di.Mode(), err)
	}
	if n := len(log.messages("other users can reach the run directory: make it 0750 or stricter")); n != 1 {
		t.Errorf("%d warnings about the run directory's mode 0777, want 1", n)
	}
}
