//go:build linux

package uffdwp

import (
	"bufio"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// The child process stands in for QEMU: it maps a memfd shared (the
// aperture) and writes it on command.

// childEnv makes the test binary the child.
const childEnv = "GMIG_UFFDWP_CHILD"

// childPages is the child's memfd size in pages; the first
// childPopulated are written before it says ready, the rest are never
// touched until a command writes them.
const (
	childPages     = 64
	childPopulated = 32
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(child())
	}
	os.Exit(m.Run())
}

// child serves commands on stdin, one per line, answering "ok":
//
//	w OFF VAL   store byte VAL at offset OFF
//	race LO HI  start a goroutine storing random bytes at random offsets of pages [LO, HI)
//	stop        stop it
//	map         map the memfd a second time, elsewhere
func child() int {
	fd, err := unix.MemfdCreate("uffdwp-child", 0)
	if err == nil {
		err = unix.Ftruncate(fd, childPages*PageSize)
	}
	var mem []byte
	if err == nil {
		mem, err = unix.Mmap(fd, 0, childPages*PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	}
	if err != nil {
		fmt.Println("child:", err)
		return 1
	}
	for p := range childPopulated {
		mem[p*PageSize] = byte(p)
	}
	var stop atomic.Bool
	var wg sync.WaitGroup
	fmt.Println("ready", fd)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		arg := func(i int) int { n, _ := strconv.Atoi(f[i]); return n }
		switch f[0] {
		case "w":
			mem[arg(1)] = byte(arg(2))
		case "race":
			lo, hi := arg(1), arg(2)
			stop.Store(false)
			wg.Go(func() {
				for !stop.Load() {
					mem[lo*PageSize+rand.IntN((hi-lo)*PageSize)] = byte(rand.Uint32())
				}
			})
		case "stop":
			stop.Store(true)
			wg.Wait()
		case "map":
			if _, err := unix.Mmap(fd, 0, PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
				fmt.Println("child:", err)
				return 1
			}
		}
		fmt.Println("ok")
	}
	return 0
}

type childProc struct {
	pid  int
	in   io.Writer
	out  *bufio.Scanner
	file *os.File // this process's descriptor of the child's memfd
	mem  []byte   // this process's read-only view of it
}

func startChild(t *testing.T) *childProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
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
	// Wait for it all along, as gmigd waits for its QEMU.
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		in.Close()
		if err := <-exited; err != nil {
			t.Errorf("child: %v", err)
		}
	})
	c := &childProc{pid: cmd.Process.Pid, in: in, out: bufio.NewScanner(out)}
	var fd int
	if !c.out.Scan() {
		t.Fatal("child ended before ready")
	}
	if _, err := fmt.Sscanf(c.out.Text(), "ready %d", &fd); err != nil {
		t.Fatalf("child said %q: %v", c.out.Text(), err)
	}
	if c.file, err = os.Open(fmt.Sprintf("/proc/%d/fd/%d", c.pid, fd)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.file.Close() })
	if c.mem, err = unix.Mmap(int(c.file.Fd()), 0, childPages*PageSize, unix.PROT_READ, unix.MAP_SHARED); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(c.mem) })
	return c
}

// do sends one command and waits for its "ok".
func (c *childProc) do(t *testing.T, format string, args ...any) {
	t.Helper()
	if _, err := fmt.Fprintf(c.in, format+"\n", args...); err != nil {
		t.Fatal(err)
	}
	if !c.out.Scan() || c.out.Text() != "ok" {
		t.Fatalf("child answered %q to %q (%v)", c.out.Text(), fmt.Sprintf(format, args...), c.out.Err())
	}
}

// snapshot copies the child's memory as it is now.
func (c *childProc) snapshot() []byte { return append([]byte(nil), c.mem...) }

// changed lists the pages where now differs from before: the oracle.
func changed(before, now []byte) []int {
	var out []int
	for p := range len(now) / PageSize {
		if string(before[p*PageSize:(p+1)*PageSize]) != string(now[p*PageSize:(p+1)*PageSize]) {
			out = append(out, p)
		}
	}
	return out
}

func openChild(t *testing.T, c *childProc) *Log {
	t.Helper()
	l, err := Open(c.pid, c.file)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})
	if got := l.Ranges(); len(got) != 1 || got[0].Len != childPages*PageSize || got[0].Off != 0 {
		t.Fatalf("ranges %+v, want the child's one mapping of %d pages", got, childPages)
	}
	return l
}
