package tests

import (
	"bufio"
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/hostd/qemu"
)

// env is what an end-to-end test boots with.
type env struct {
	root   qemu.Root
	kernel string
	initrd string
	accel  string
}

// needEnv returns the provisioned environment or skips the test saying what
// is missing.
func needEnv(t *testing.T) env {
	t.Helper()
	cache := os.Getenv("GMIG_CACHE")
	if cache == "" {
		cache = filepath.Join("..", ".cache")
	}
	cache, _ = filepath.Abs(cache)
	e := env{
		root:   qemu.Root(filepath.Join(cache, "qemu-root")),
		kernel: filepath.Join(cache, "guest", "vmlinuz"),
		initrd: filepath.Join(cache, "guest", "initramfs.cpio"),
	}
	if err := e.root.Check(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	for _, f := range []string{e.kernel, e.initrd} {
		if _, err := os.Stat(f); err != nil {
			t.Skipf("skipping: %v (run `make guest-image`)", err)
		}
	}
	accel, why := qemu.DefaultAccel()
	if a := os.Getenv("GMIG_ACCEL"); a != "" {
		accel, why = a, "GMIG_ACCEL"
	}
	e.accel = accel
	t.Logf("accelerator %s: %s", accel, why)
	return e
}

// console collects a guest's serial output as lines, each stamped with the
// host time it arrived.
type console struct {
	t     *testing.T
	mu    sync.Mutex
	part  []byte
	lines []line
	seen  chan string // every complete line, for waiters
}

type line struct {
	at   time.Time
	text string
}

func newConsole(t *testing.T) *console {
	return &console{t: t, seen: make(chan string, 4096)}
}

func (c *console) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.part = append(c.part, p...)
	for {
		i := bytes.IndexByte(c.part, '\n')
		if i < 0 {
			break
		}
		text := strings.TrimRight(string(c.part[:i]), "\r")
		c.part = c.part[i+1:]
		c.lines = append(c.lines, line{time.Now(), text})
		select {
		case c.seen <- text:
		default:
		}
	}
	return len(p), nil
}

// gmigLines returns the guest program's report lines ("gmig: " stripped).
func (c *console) gmigLines() []line {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []line
	for _, l := range c.lines {
		if i := strings.Index(l.text, "gmig: "); i >= 0 {
			out = append(out, line{l.at, l.text[i+len("gmig: "):]})
		}
	}
	return out
}

// dump logs the whole console, for failures.
func (c *console) dump() {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, l := range c.lines {
		b.WriteString(l.text)
		b.WriteByte('\n')
	}
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	for sc.Scan() {
		c.t.Log("console: " + sc.Text())
	}
}

// e2eTimeout bounds one VM run: GMIG_E2E_TIMEOUT (a duration) or 5 minutes.
func e2eTimeout() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("GMIG_E2E_TIMEOUT")); err == nil {
		return d
	}
	return 5 * time.Minute
}
