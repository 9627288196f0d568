//go:build linux && amd64

package ptinject

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// childEnv makes the test binary a child to inject into: "plain" or
// "seccomp" (under an allow-everything seccomp filter).
const childEnv = "GMIG_PTINJECT_CHILD"

func TestMain(m *testing.M) {
	if mode := os.Getenv(childEnv); mode != "" {
		os.Exit(child(mode))
	}
	os.Exit(m.Run())
}

// child answers "ping" with "pong" until stdin ends, while two goroutines
// spin (so the runtime preempts them with signals during injections).
func child(mode string) int {
	if mode == "seccomp" {
		if err := allowAllSeccomp(); err != nil {
			fmt.Println("seccomp:", err)
			return 1
		}
	}
	for range 2 {
		go func() {
			x := 0
			for {
				x++
			}
		}()
	}
	fmt.Println("ready")
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		fmt.Println("pong")
	}
	return 0
}

// allowAllSeccomp puts every thread under a seccomp filter that allows
// every call (seccomp(2), SECCOMP_SET_MODE_FILTER with TSYNC).
func allowAllSeccomp() error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	filter := unix.SockFilter{Code: unix.BPF_RET | unix.BPF_K, K: unix.SECCOMP_RET_ALLOW}
	prog := unix.SockFprog{Len: 1, Filter: &filter}
	_, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(&prog)))
	runtime.KeepAlive(&prog)
	if errno != 0 {
		return errno
	}
	return nil
}

type childProc struct {
	cmd *exec.Cmd
	in  io.WriteCloser
	out *bufio.Scanner
}

func startChild(t *testing.T, mode string) *childProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+mode)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &childProc{cmd: cmd, in: in, out: bufio.NewScanner(out)}
	// Wait for it all along, as gmigd waits for its QEMU: a parent's wait
	// sees the stops of a child its own thread group traces.
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		in.Close()
		if err := <-exited; err != nil {
			t.Errorf("child: %v", err)
		}
	})
	if line := c.line(t); line != "ready" {
		t.Fatalf("child said %q, want ready", line)
	}
	return c
}

func (c *childProc) line(t *testing.T) string {
	t.Helper()
	if !c.out.Scan() {
		t.Fatalf("child ended: %v", c.out.Err())
	}
	return c.out.Text()
}

func (c *childProc) ping(t *testing.T) {
	t.Helper()
	if _, err := io.WriteString(c.in, "ping\n"); err != nil {
		t.Fatal(err)
	}
	if got := c.line(t); got != "pong" {
		t.Fatalf("child answered %q, want pong", got)
	}
}

// userfaultfds counts pid's descriptors that are userfaultfds.
func userfaultfds(t *testing.T, pid int) int {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, _ := os.Readlink(dir + "/" + e.Name()); strings.Contains(l, "userfaultfd") {
			n++
		}
	}
	return n
}

// TestUserfaultfdInChild injects userfaultfd into a busy child many
// times: each time this process gets a userfaultfd, the child keeps none,
// and the child goes on answering (the call it was blocked in, if any,
// restarted and its signals handed back).
func TestUserfaultfdInChild(t *testing.T) {
	c := startChild(t, "plain")
	pid := c.cmd.Process.Pid
	for i := range 20 {
		fd, err := Userfaultfd(pid, unix.O_CLOEXEC|1) // 1: UFFD_USER_MODE_ONLY
		if err != nil {
			t.Fatalf("injection %d: %v", i, err)
		}
		l, err := os.Readlink(fmt.Sprintf("/proc/self/fd/%d", fd))
		unix.Close(fd)
		if err != nil || !strings.Contains(l, "userfaultfd") {
			t.Fatalf("injection %d: descriptor %d is %q (%v), want a userfaultfd", i, fd, l, err)
		}
		if n := userfaultfds(t, pid); n != 0 {
			t.Fatalf("injection %d: the child kept %d userfaultfd(s)", i, n)
		}
		c.ping(t)
	}
}

// TestSeccompRefused: a target under seccomp is not touched.
func TestSeccompRefused(t *testing.T) {
	c := startChild(t, "seccomp")
	_, err := Userfaultfd(c.cmd.Process.Pid, unix.O_CLOEXEC)
	if !errors.Is(err, ErrSeccomp) {
		t.Fatalf("Userfaultfd = %v, want ErrSeccomp", err)
	}
	c.ping(t)
}

// TestGoneProcess: a pid that does not exist is an error, not a hang.
func TestGoneProcess(t *testing.T) {
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, err := Userfaultfd(cmd.Process.Pid, unix.O_CLOEXEC); err == nil {
		t.Fatal("Userfaultfd of an ended process succeeded")
	}
}
