package hostd

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// Files and directories of the run directory this file sets up.
const (
	// lockFileName is RUN_DIR/gmigd.lock: flocked by the gmigd that owns
	// the run directory, for its whole life; it holds that gmigd's pid.
	lockFileName = "gmigd.lock"
	// vgpuDirName is RUN_DIR/vgpu, the vGPU sockets' namespace: a vGPU's
	// name can never make its socket the control socket's path.
	vgpuDirName = "vgpu"
)

// ErrRunDirInUse is a run directory another gmigd holds: its sockets,
// QEMUs and migration records are that gmigd's.
var ErrRunDirInUse = errors.New("hostd: run dir is in use by another gmigd")

// runDirInUse is ErrRunDirInUse with the run directory and the holder's pid.
type runDirInUse struct{ dir, pid string }

func (e runDirInUse) Error() string {
	return fmt.Sprintf("hostd: run dir %s is in use by another gmigd (pid %s)", e.dir, e.pid)
}

func (e runDirInUse) Is(target error) bool { return target == ErrRunDirInUse }

// lockRunDir takes dir's lock file without waiting and writes this
// process's pid in it; the lock lasts until the file is closed (or the
// process ends: a killed gmigd leaves no lock behind).
func lockRunDir(dir string) (*os.File, error) {
	f, holder, err := takeLock(filepath.Join(dir, lockFileName), 0o640, fmt.Appendf(nil, "%d\n", os.Getpid()))
	if errors.Is(err, errLockHeld) {
		pid := strings.TrimSpace(holder)
		if pid == "" {
			pid = "unknown"
		}
		return nil, runDirInUse{dir: dir, pid: pid}
	}
	if err != nil {
		return nil, fmt.Errorf("hostd: the run dir's lock: %w", err)
	}
	return f, nil
}

// errLockHeld: another open file (another gmigd) holds a lock file.
var errLockHeld = errors.New("hostd: lock file held")

// takeLock takes the lock file path (made with mode if need be) without
// waiting and writes content in it; the lock lasts until the file is
// closed or the process ends. Held elsewhere, it fails with errLockHeld
// and what the holder wrote. The file is close-on-exec, so the QEMUs
// gmigd starts never hold it. gmigd's run-dir and GPU locks are taken
// here.
func takeLock(path string, mode os.FileMode, content []byte) (*os.File, string, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, mode)
	if err != nil {
		return nil, "", fmt.Errorf("opening %s: %w", path, err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			b, _ := os.ReadFile(path)
			return nil, string(b), errLockHeld
		}
		return nil, "", fmt.Errorf("locking %s: %w", path, err)
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	if _, err := f.WriteAt(content, 0); err != nil {
		f.Close()
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	return f, "", nil
}

// readLock says whether another open file holds the lock file path, and
// what its holder wrote in it (a file no one holds is a stale one: a
// gmigd that ended). It takes no lock that outlasts the call.
func readLock(path string) (holder string, held bool, err error) {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_SH|syscall.LOCK_NB); err != nil {
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return "", false, fmt.Errorf("locking %s: %w", path, err)
		}
		b, err := io.ReadAll(f)
		return string(b), true, err
	}
	return "", false, nil // closing f drops the shared lock
}

// prepareRunDir makes the vGPU sockets' directory with its mode, and warns
// when others can reach the run directory (the sockets' own modes keep
// them out, but the VMs' consoles and migration records are files there).
func (h *Host) prepareRunDir() error {
	if fi, err := os.Stat(h.cfg.RunDir); err == nil && fi.Mode().Perm()&0o007 != 0 {
		h.log.Warn().Str("dir", h.cfg.RunDir).Str("mode", fi.Mode().Perm().String()).
			Msg("other users can reach the run directory: make it 0750 or stricter")
	}
	dir := filepath.Join(h.cfg.RunDir, vgpuDirName)
	if err := os.MkdirAll(dir, vgpuDirMode); err != nil {
		return fmt.Errorf("hostd: creating the vGPU socket directory: %w", err)
	}
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("hostd: the vGPU socket directory: %w", err)
	}
	// Whatever the umask or an older mode; a set-group-ID bit (inherited
	// from the run directory) stays, so the sockets get its group.
	if err := os.Chmod(dir, vgpuDirMode|fi.Mode()&os.ModeSetgid); err != nil {
		return fmt.Errorf("hostd: the vGPU socket directory: %w", err)
	}
	return nil
}

// vgpuSocket is vGPU name's vfio-user socket path: RUN_DIR/vgpu/NAME.sock.
func (h *Host) vgpuSocket(name string) string {
	return filepath.Join(h.cfg.RunDir, vgpuDirName, name+".sock")
}
