package hostd

import (
	"errors"
	"fmt"
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
// process ends: a killed gmigd leaves no lock behind). The file is
// close-on-exec, so the QEMUs gmigd starts never hold it.
func lockRunDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o640)
	if err != nil {
		return nil, fmt.Errorf("hostd: opening the run dir's lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			pid := "unknown"
			if b, rerr := os.ReadFile(path); rerr == nil && len(strings.TrimSpace(string(b))) > 0 {
				pid = strings.TrimSpace(string(b))
			}
			return nil, runDirInUse{dir: dir, pid: pid}
		}
		return nil, fmt.Errorf("hostd: locking the run dir %s: %w", dir, err)
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, fmt.Errorf("hostd: run dir lock: %w", err)
	}
	if _, err := f.WriteAt([]byte(fmt.Sprintf("%d\n", os.Getpid())), 0); err != nil {
		f.Close()
		return nil, fmt.Errorf("hostd: run dir lock: %w", err)
	}
	return f, nil
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
