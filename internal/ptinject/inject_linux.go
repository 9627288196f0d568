//go:build linux && amd64

package ptinject

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"

	"golang.org/x/sys/unix"
)

// syscallInsn is x86-64's SYSCALL instruction (Intel SDM vol. 2B, "SYSCALL":
// opcode 0F 05).
var syscallInsn = []byte{0x0f, 0x05}

// maxSteps bounds the single steps one injected call may take: each step
// that does not execute the instruction is a stop for a signal or an
// interrupt, suppressed and retried. A thread that keeps stopping this
// often is being signalled in a loop.
const maxSteps = 64

// maxErrno is the largest errno a raw system call returns as -errno
// (include/linux/err.h, MAX_ERRNO).
const maxErrno = 4095

// userfaultfdHere is Userfaultfd with this process as the tracer (the
// helper's work): it runs userfaultfd(flags) in pid, takes the new
// descriptor into this process and closes the target's.
func userfaultfdHere(pid, flags int) (int, error) {
	fd := -1
	err := inject(pid, func(t *tracee) error {
		remote, err := t.syscall(unix.SYS_USERFAULTFD, uint64(flags))
		if err != nil {
			return fmt.Errorf("userfaultfd: %w", err)
		}
		fd, err = getfd(pid, int(remote))
		if _, cerr := t.syscall(unix.SYS_CLOSE, remote); cerr != nil && err == nil {
			err = fmt.Errorf("closing the target's descriptor %d: %w", remote, cerr)
		}
		return err
	})
	if err != nil {
		if fd >= 0 {
			unix.Close(fd)
		}
		return -1, err
	}
	return fd, nil
}

// getfd duplicates descriptor remote of process pid into this process.
func getfd(pid, remote int) (int, error) {
	pfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return -1, fmt.Errorf("pidfd_open(%d): %w", pid, err)
	}
	defer unix.Close(pfd)
	fd, err := unix.PidfdGetfd(pfd, remote, 0)
	if err != nil {
		return -1, fmt.Errorf("pidfd_getfd(%d, %d): %w", pid, remote, err)
	}
	return fd, nil
}

// tracee is the one thread an injection holds.
type tracee struct {
	tid     int
	saved   unix.PtraceRegs // its registers when it stopped
	insn    uint64          // address of a syscall instruction in its memory
	pending unix.Signal     // a signal suppressed while held, handed back at detach
}

// inject holds pid's main thread, runs fn with it stopped and releases it
// with its registers restored.
func inject(pid int, fn func(*tracee) error) (err error) {
	if err := checkSeccomp(pid); err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := unix.PtraceSeize(pid); err != nil {
		if errors.Is(err, unix.EPERM) {
			return fmt.Errorf("%w: pid %d: %v", ErrNotPermitted, pid, err)
		}
		return fmt.Errorf("ptinject: seizing pid %d: %w", pid, err)
	}
	t := &tracee{tid: pid}
	restore := false
	defer func() {
		if derr := t.detach(restore); derr != nil && err == nil {
			err = derr
		}
	}()
	if err := unix.PtraceInterrupt(pid); err != nil {
		return fmt.Errorf("ptinject: interrupting pid %d: %w", pid, err)
	}
	if err := t.wait(); err != nil {
		return err
	}
	if err := unix.PtraceGetRegs(pid, &t.saved); err != nil {
		return fmt.Errorf("ptinject: registers of pid %d: %w", pid, err)
	}
	restore = true
	if t.insn, err = t.findSyscall(); err != nil {
		return err
	}
	if err := fn(t); err != nil {
		return fmt.Errorf("ptinject: pid %d: %w", pid, err)
	}
	return nil
}

// wait waits for the thread's next stop and notes a signal it stopped to
// receive, which is suppressed when it is resumed and handed back at
// detach.
func (t *tracee) wait() error {
	for {
		var ws unix.WaitStatus
		_, err := unix.Wait4(t.tid, &ws, unix.WALL, nil)
		switch {
		case errors.Is(err, unix.EINTR):
			continue
		case err != nil:
			return fmt.Errorf("ptinject: waiting for pid %d: %w", t.tid, err)
		case ws.Exited(), ws.Signaled():
			return fmt.Errorf("ptinject: pid %d ended while held", t.tid)
		case !ws.Stopped():
			continue
		}
		event := (uint32(ws) >> 16) & 0xff // ptrace(2): status>>16 is the PTRACE_EVENT
		if sig := ws.StopSignal(); event == 0 && sig != unix.SIGTRAP {
			t.pending = sig // a signal-delivery-stop
		}
		return nil
	}
}

// syscall runs system call nr with args in the held thread and returns its
// result, or its errno.
func (t *tracee) syscall(nr uint64, args ...uint64) (uint64, error) {
	regs := t.saved
	regs.Rip = t.insn
	regs.Rax = nr
	regs.Orig_rax = ^uint64(0) // -1: not in a system call, so nothing restarts over it
	for i, r := range []*uint64{&regs.Rdi, &regs.Rsi, &regs.Rdx, &regs.R10, &regs.R8, &regs.R9} {
		if i < len(args) {
			*r = args[i]
		}
	}
	if err := unix.PtraceSetRegs(t.tid, &regs); err != nil {
		return 0, fmt.Errorf("setting registers: %w", err)
	}
	var out unix.PtraceRegs
	for range maxSteps {
		if err := unix.PtraceSingleStep(t.tid); err != nil {
			return 0, fmt.Errorf("single step: %w", err)
		}
		if err := t.wait(); err != nil {
			return 0, err
		}
		if err := unix.PtraceGetRegs(t.tid, &out); err != nil {
			return 0, fmt.Errorf("registers after the call: %w", err)
		}
		if out.Rip == t.insn+uint64(len(syscallInsn)) {
			if r := int64(out.Rax); r < 0 && r >= -maxErrno {
				return 0, unix.Errno(-r)
			}
			return out.Rax, nil
		}
	}
	return 0, fmt.Errorf("system call %d not executed after %d steps", nr, maxSteps)
}

// detach puts the saved registers back (when restore) and lets the thread
// go, with the signal it was stopped for, if any.
func (t *tracee) detach(restore bool) error {
	var err error
	if restore {
		if serr := unix.PtraceSetRegs(t.tid, &t.saved); serr != nil {
			err = fmt.Errorf("ptinject: restoring the registers of pid %d: %w", t.tid, serr)
		}
	}
	_, _, errno := unix.Syscall6(unix.SYS_PTRACE, unix.PTRACE_DETACH, uintptr(t.tid), 0, uintptr(t.pending), 0, 0)
	if errno != 0 && errno != unix.ESRCH && err == nil {
		err = fmt.Errorf("ptinject: detaching from pid %d: %w", t.tid, errno)
	}
	return err
}

// findSyscall returns the address of a syscall instruction in the
// thread's memory: the one it stopped behind when it was in a system call,
// else the first in its vDSO or, failing that, another executable mapping.
func (t *tracee) findSyscall() (uint64, error) {
	mem, err := os.Open(fmt.Sprintf("/proc/%d/mem", t.tid))
	if err != nil {
		return 0, fmt.Errorf("ptinject: %w", err)
	}
	defer mem.Close()
	if int64(t.saved.Orig_rax) >= 0 && t.saved.Rip >= 2 {
		b := make([]byte, 2)
		if _, err := mem.ReadAt(b, int64(t.saved.Rip-2)); err == nil && bytes.Equal(b, syscallInsn) {
			return t.saved.Rip - 2, nil
		}
	}
	ranges, err := execMappings(t.tid)
	if err != nil {
		return 0, err
	}
	for _, r := range ranges {
		b := make([]byte, min(r[1]-r[0], 1<<20))
		n, _ := mem.ReadAt(b, int64(r[0]))
		if i := bytes.Index(b[:n], syscallInsn); i >= 0 {
			return r[0] + uint64(i), nil
		}
	}
	return 0, fmt.Errorf("ptinject: no syscall instruction in pid %d's executable mappings", t.tid)
}

// execMappings lists pid's executable mappings from /proc/PID/maps, the
// vDSO first.
func execMappings(pid int) ([][2]uint64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, fmt.Errorf("ptinject: %w", err)
	}
	defer f.Close()
	var out [][2]uint64
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var lo, hi uint64
		var perms string
		if _, err := fmt.Sscanf(sc.Text(), "%x-%x %s", &lo, &hi, &perms); err != nil || !strings.Contains(perms, "x") {
			continue
		}
		if strings.HasSuffix(sc.Text(), "[vdso]") {
			out = append([][2]uint64{{lo, hi}}, out...)
		} else {
			out = append(out, [2]uint64{lo, hi})
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("ptinject: reading pid %d's maps: %w", pid, err)
	}
	return out, nil
}

// checkSeccomp refuses a target whose main thread runs under a seccomp
// filter (proc(5), /proc/PID/status "Seccomp": 0 is none).
func checkSeccomp(pid int) error {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return fmt.Errorf("ptinject: %w", err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Seccomp:"); ok && strings.TrimSpace(v) != "0" {
			return fmt.Errorf("%w (pid %d, mode %s)", ErrSeccomp, pid, strings.TrimSpace(v))
		}
	}
	return nil
}
