package hostd

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// controlSocketMode is the control socket's mode: the daemon's user only
// (anyone who can connect controls every vGPU and VM of this host).
const controlSocketMode = 0o600

// listenPrivate listens on a UNIX socket at path that only this process's
// user can connect to (ListenAPI).
func listenPrivate(path string) (net.Listener, error) {
	tmpDir, err := os.MkdirTemp(filepath.Dir(path), ".") // 0700
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmpDir)
	tmp := filepath.Join(tmpDir, "s")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: tmp, Net: "unix"})
	if err != nil {
		return nil, err
	}
	l.SetUnlinkOnClose(false) // it moves: privateListener.Close removes it
	fail := func(err error) (net.Listener, error) {
		l.Close()
		return nil, err
	}
	if err := os.Chmod(tmp, controlSocketMode); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	if err := checkPrivateSocket(path); err != nil {
		os.Remove(path)
		return fail(err)
	}
	return &privateListener{UnixListener: l, path: path}, nil
}

// checkPrivateSocket checks that path is a socket of mode 0600 owned by
// this process's effective user.
func checkPrivateSocket(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case fi.Mode()&os.ModeSocket == 0:
		return fmt.Errorf("%s is not a socket", path)
	case fi.Mode().Perm() != controlSocketMode:
		return fmt.Errorf("%s has mode %v, want %v", path, fi.Mode().Perm(), os.FileMode(controlSocketMode))
	case !ok || st.Uid != uint32(os.Geteuid()):
		return fmt.Errorf("%s is not owned by this process's user (uid %d)", path, os.Geteuid())
	}
	return nil
}

// privateListener removes its socket file when closed (the one bound was
// renamed, so the net package's own removal would miss it).
type privateListener struct {
	*net.UnixListener
	path string
	once sync.Once
}

func (l *privateListener) Close() error {
	err := l.UnixListener.Close()
	l.once.Do(func() { os.Remove(l.path) })
	return err
}
