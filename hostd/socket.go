package hostd

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// Socket modes, set explicitly whatever the umask.
const (
	// controlSocketMode is the control socket's: the daemon's user only
	// (anyone who can connect controls every vGPU and VM of this host).
	controlSocketMode = 0o600
	// vgpuSocketMode is a vGPU's vfio-user socket's: the daemon's user
	// and the socket's group (connecting takes write permission; the
	// group is where a QEMU running as another user gets in,
	// docs/operator-guide.md), never others.
	vgpuSocketMode = 0o660
	// vgpuDirMode is RUN_DIR/vgpu's, the vGPU sockets' directory: its
	// group may reach the sockets in it, others may not.
	vgpuDirMode = 0o750
)

// staleProbeTimeout bounds the connect that tells a live socket from a
// stale one (a local connect answers at once; this only guards against a
// server that hangs).
const staleProbeTimeout = 2 * time.Second

// ErrSocketInUse is a socket path a live server still listens on: it is
// never removed or replaced.
var ErrSocketInUse = errors.New("hostd: socket is in use by a running server")

// bindSocket listens on a UNIX socket at path with mode, owned by this
// process's user: it is bound inside a private (0700) directory, given its
// mode there and only then renamed into place, so it is never reachable
// with another mode. It is checked after the rename. The listener does not
// remove the file when closed (removeOwn does); fi identifies the file.
func bindSocket(path string, mode os.FileMode) (l *net.UnixListener, fi os.FileInfo, err error) {
	tmpDir, err := os.MkdirTemp(filepath.Dir(path), ".") // 0700
	if err != nil {
		return nil, nil, err
	}
	defer os.RemoveAll(tmpDir)
	tmp := filepath.Join(tmpDir, "s")
	l, err = net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, nil, err
	}
	l.SetUnlinkOnClose(false) // it moves; and closing must not unlink another's file
	fail := func(err error) (*net.UnixListener, os.FileInfo, error) {
		l.Close()
		return nil, nil, err
	}
	if err := os.Chmod(tmp, mode); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	if fi, err = checkSocket(path, mode); err != nil {
		os.Remove(path)
		return fail(err)
	}
	return l, fi, nil
}

// checkSocket checks that path is a socket of mode owned by this
// process's effective user.
func checkSocket(path string, mode os.FileMode) (os.FileInfo, error) {
	fi, err := os.Lstat(path)
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&os.ModeSocket == 0:
		return nil, fmt.Errorf("%s is not a socket", path)
	case fi.Mode().Perm() != mode:
		return nil, fmt.Errorf("%s has mode %v, want %v", path, fi.Mode().Perm(), mode)
	case !ok || st.Uid != uint32(os.Geteuid()):
		return nil, fmt.Errorf("%s is not owned by this process's user (uid %d)", path, os.Geteuid())
	}
	return fi, nil
}

// removeStaleSocket deletes a socket file left by a server that is gone:
// only once a connect to it is refused. A socket a server still listens on
// is ErrSocketInUse; any other kind of file at that path is an error.
// removed says whether there was a stale socket.
func removeStaleSocket(path string) (removed bool, err error) {
	fi, err := os.Lstat(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return false, nil
	case err != nil:
		return false, fmt.Errorf("hostd: %w", err)
	case fi.Mode()&os.ModeSocket == 0:
		return false, fmt.Errorf("hostd: %s exists and is not a socket", path)
	}
	c, err := net.DialTimeout("unix", path, staleProbeTimeout)
	switch {
	case err == nil:
		c.Close()
		return false, fmt.Errorf("%w: %s", ErrSocketInUse, path)
	case errors.Is(err, syscall.EAGAIN):
		// A listener whose backlog is full: alive.
		return false, fmt.Errorf("%w: %s", ErrSocketInUse, path)
	case !errors.Is(err, syscall.ECONNREFUSED):
		return false, fmt.Errorf("hostd: probing %s: %w", path, err)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return false, fmt.Errorf("hostd: %w", err)
	}
	return true, nil
}

// removeOwn deletes path if it is still the socket file fi: a path bound
// again since (a new vGPU of the name) is left alone.
func removeOwn(path string, fi os.FileInfo) {
	if cur, err := os.Lstat(path); err == nil && os.SameFile(cur, fi) {
		_ = os.Remove(path)
	}
}

// privateListener is the control socket's listener; closing it removes
// its socket file if that is still its own.
type privateListener struct {
	*net.UnixListener
	path string
	fi   os.FileInfo
	once sync.Once
}

func (l *privateListener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() { removeOwn(l.path, l.fi) })
	return err
}
