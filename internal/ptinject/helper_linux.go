//go:build linux && amd64

package ptinject

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// The tracer is a helper process: this binary run again with helperEnv
// set, which this package's init turns into the injection and nothing
// else. A process must not trace its own child: the kernel shows a child
// traced by its parent's thread group to the parent's ordinary waits as
// well ("traditionally we see ptrace'd stopped tasks regardless of
// options", kernel/exit.c), so Go's os/exec, waiting for QEMU to exit,
// would take the tracee's stops away from the tracer. gmigd starts QEMU,
// so gmigd never traces it itself.

// helperEnv carries "PID FLAGS" to the helper.
const helperEnv = "GMIG_PTINJECT_HELPER"

// helperTimeout bounds a helper's run: an injection takes milliseconds
// (a few system calls of one stopped thread), so a helper still running
// after this is stuck on a target that does not stop.
const helperTimeout = 10 * time.Second

// Exit codes by which the helper reports the sentinel errors.
const (
	exitFailed       = 1
	exitNotPermitted = 10
	exitSeccomp      = 11
)

func init() {
	if spec := os.Getenv(helperEnv); spec != "" {
		os.Exit(helperMain(spec))
	}
}

// helperMain injects userfaultfd into the target and sends the descriptor
// to the parent over the socket on descriptor 3.
func helperMain(spec string) int {
	var pid, flags int
	if _, err := fmt.Sscanf(spec, "%d %d", &pid, &flags); err != nil {
		fmt.Fprintf(os.Stderr, "ptinject: helper spec %q: %v\n", spec, err)
		return exitFailed
	}
	fd, err := userfaultfdHere(pid, flags)
	if err == nil {
		err = unix.Sendmsg(3, []byte{0}, unix.UnixRights(fd), nil, 0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		switch {
		case errors.Is(err, ErrNotPermitted):
			return exitNotPermitted
		case errors.Is(err, ErrSeccomp):
			return exitSeccomp
		}
		return exitFailed
	}
	return 0
}

// Userfaultfd runs userfaultfd(flags) in process pid and returns this
// process's descriptor of the new userfaultfd, close-on-exec; the target's
// own descriptor is closed again. The userfaultfd is bound to pid's memory.
// A helper process (this binary again) is the tracer.
func Userfaultfd(pid, flags int) (int, error) {
	if err := checkSeccomp(pid); err != nil {
		return -1, err
	}
	self, err := os.Executable()
	if err != nil {
		return -1, fmt.Errorf("ptinject: %w", err)
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("ptinject: %w", err)
	}
	defer unix.Close(pair[0])
	theirs := os.NewFile(uintptr(pair[1]), "ptinject-helper")
	cmd := exec.Command(self)
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%d %d", helperEnv, pid, flags))
	cmd.ExtraFiles = []*os.File{theirs} // descriptor 3
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = time.Second
	err = cmd.Start()
	theirs.Close()
	if err != nil {
		return -1, fmt.Errorf("ptinject: starting the helper: %w", err)
	}
	timer := time.AfterFunc(helperTimeout, func() { cmd.Process.Kill() })
	defer timer.Stop()
	fd, rerr := receiveFD(pair[0]) // returns at the helper's send or its exit
	werr := cmd.Wait()
	if werr != nil || rerr != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return -1, helperError(werr, rerr, strings.TrimSpace(stderr.String()))
	}
	return fd, nil
}

// receiveFD reads the one descriptor the helper sends.
func receiveFD(sock int) (int, error) {
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := unix.Recvmsg(sock, make([]byte, 1), oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil {
		return -1, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		return -1, fmt.Errorf("no descriptor received (%v)", err)
	}
	fds, err := unix.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		return -1, fmt.Errorf("no descriptor received (%v)", err)
	}
	return fds[0], nil
}

// helperError turns the helper's exit into this package's errors.
func helperError(werr, rerr error, msg string) error {
	var ee *exec.ExitError
	if errors.As(werr, &ee) {
		switch ee.ExitCode() {
		case exitNotPermitted:
			return fmt.Errorf("%w (%s)", ErrNotPermitted, msg)
		case exitSeccomp:
			return fmt.Errorf("%w (%s)", ErrSeccomp, msg)
		}
	}
	if msg == "" {
		msg = fmt.Sprint(errors.Join(werr, rerr))
	}
	return fmt.Errorf("ptinject: helper: %s", strings.TrimPrefix(msg, "ptinject: "))
}
