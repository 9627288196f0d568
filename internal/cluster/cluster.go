// Package cluster runs gmigd daemons as separate processes on this machine
// and watches their VMs' serial consoles: the harness of the real-VM demo,
// the real-VM benchmark and the end-to-end tests. Each daemon has its own
// run directory, control socket and migration listener on loopback; the
// migrations between them go through the daemons' control API, exactly as
// an operator's `gmigd migrate` does, and over mutual TLS as gmigd's
// defaults have it: the first daemon started in a cluster directory makes
// the cluster's CA (DIR/tls/ca.pem), and each daemon gets a certificate of
// its own from it (DIR/tls/NAME.pem, NAME.key).
package cluster

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"time"

	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/internal/mtls"
)

// Daemon is one gmigd process.
type Daemon struct {
	Name   string
	RunDir string
	// Addr is its migration listener (host:port).
	Addr   string
	Client *hostd.Client
	// TLS is its certificate, key and the cluster's CA (zero with
	// Options.Insecure).
	TLS  mtls.Files
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
}

// Options start a Daemon.
type Options struct {
	Binary   string // the gmigd binary
	Pool     string // -pool (default 512M)
	QEMURoot string // -qemu-root
	LogLevel string // default info
	Extra    []string
	// Insecure runs the daemon with -insecure-migrations instead of mutual
	// TLS.
	Insecure bool
	// TLSNames are names or addresses the daemon's certificate names
	// besides its own name and loopback's (for a daemon reached at
	// another address, e.g. in a network namespace).
	TLSNames []string
}

// TLSDir is where a cluster directory keeps its CA and the daemons'
// certificates.
func TLSDir(dir string) string { return filepath.Join(dir, "tls") }

// Start runs `gmigd serve` in run directory dir/name (made if need be: a
// restart in the same directory recovers what the last one left), listening for
// migrations on 127.0.0.1 at a port it picks, with mutual TLS (a
// certificate from the cluster's CA in TLSDir(dir), both made on first
// use) unless o.Insecure, and waits until its control API answers. Its log
// goes to RUNDIR/gmigd.log.
func Start(ctx context.Context, dir, name string, o Options) (*Daemon, error) {
	runDir := filepath.Join(dir, name)
	if err := os.MkdirAll(runDir, 0o750); err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(filepath.Join(runDir, "gmigd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return nil, err
	}
	// A restart in the same run directory: the old address is stale.
	addrFile := filepath.Join(runDir, "migrate.addr")
	_ = os.Remove(addrFile)
	args := []string{"serve", "-run-dir", runDir, "-migrate-listen", "127.0.0.1:0",
		"-pool", cmpOr(o.Pool, "512M"), "-log-level", cmpOr(o.LogLevel, "info")}
	if o.QEMURoot != "" {
		args = append(args, "-qemu-root", o.QEMURoot)
	}
	var files mtls.Files
	if o.Insecure {
		args = append(args, "-insecure-migrations")
	} else {
		if files, err = mtls.Ensure(TLSDir(dir), mtls.Host{Name: name, SANs: o.TLSNames}); err != nil {
			logf.Close()
			return nil, fmt.Errorf("cluster: certificate for gmigd %s: %w", name, err)
		}
		args = append(args, "-tls-cert", files.Cert, "-tls-key", files.Key, "-tls-ca", files.CA)
	}
	args = append(args, o.Extra...)
	cmd := exec.Command(o.Binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// The daemon dies with whoever started it (a test, the demo), which
	// stops its VMs.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("cluster: starting gmigd %s: %w", name, err)
	}
	d := &Daemon{Name: name, RunDir: runDir, TLS: files, cmd: cmd, log: logf, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(d.done) }()
	if err := waitFor(ctx, d.done, func() bool {
		b, err := os.ReadFile(addrFile)
		if err != nil || !strings.HasSuffix(string(b), "\n") {
			return false
		}
		d.Addr = strings.TrimSpace(string(b))
		return true
	}); err != nil {
		d.Kill()
		return nil, fmt.Errorf("cluster: gmigd %s did not come up: %w (log: %s)", name, err, d.LogTail(20))
	}
	d.Client = hostd.NewClient(filepath.Join(runDir, "gmigd.sock"))
	if err := waitFor(ctx, d.done, func() bool { _, err := d.Client.List(); return err == nil }); err != nil {
		d.Kill()
		return nil, fmt.Errorf("cluster: gmigd %s's control API: %w", name, err)
	}
	return d, nil
}

func cmpOr(v, def string) string {
	if v == "" {
		return def
	}
	return v
}

// waitFor polls ok until it holds, the process ends or ctx ends.
func waitFor(ctx context.Context, exited <-chan struct{}, ok func() bool) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for !ok() {
		select {
		case <-exited:
			return errors.New("the process exited")
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// Done is closed when the process has exited.
func (d *Daemon) Done() <-chan struct{} { return d.done }

// Kill ends the daemon at once (SIGKILL): what a crash looks like. Its
// QEMUs live on (a restarted daemon in the same run directory ends those
// of migrations it left pending).
func (d *Daemon) Kill() {
	_ = d.cmd.Process.Kill()
	<-d.done
	d.log.Close()
}

// Stop asks the daemon to shut down (SIGTERM) and waits, killing it after
// timeout.
func (d *Daemon) Stop(timeout time.Duration) {
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.done:
	case <-time.After(timeout):
		_ = d.cmd.Process.Kill()
		<-d.done
	}
	d.log.Close()
}

// LogTail returns the last n lines of the daemon's log.
func (d *Daemon) LogTail(n int) string {
	b, _ := os.ReadFile(filepath.Join(d.RunDir, "gmigd.log"))
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Console is the path of VM vm's serial console log on this daemon.
func (d *Daemon) Console(vm string) string { return filepath.Join(d.RunDir, "vms", vm, "console.log") }

// Console follows a VM's serial console log as it grows.
type Console struct {
	path    string
	f       *os.File
	r       *bufio.Reader
	partial string
}

// Follow returns a Console reading the file at path from its start (the
// file may not exist yet).
func Follow(path string) *Console { return &Console{path: path} }

// Close releases the file.
func (c *Console) Close() {
	if c.f != nil {
		c.f.Close()
	}
}

// Wait reads on until a line matches re and returns its submatches; the
// next Wait goes on after that line. Lines are matched without their
// line ending (a serial console ends them with "\r\n").
func (c *Console) Wait(ctx context.Context, re *regexp.Regexp) ([]string, error) {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if c.f == nil {
			if f, err := os.Open(c.path); err == nil {
				c.f, c.r = f, bufio.NewReader(f)
			}
		}
		for c.r != nil {
			s, err := c.r.ReadString('\n')
			c.partial += s
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, err
			}
			line := strings.TrimRight(c.partial, "\r\n")
			c.partial = ""
			if m := re.FindStringSubmatch(line); m != nil {
				return m, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("cluster: waiting for %q in %s: %w", re, c.path, ctx.Err())
		case <-t.C:
		}
	}
}

// WaitLine waits until a line of the file at path matches re and returns
// its submatches.
func WaitLine(ctx context.Context, path string, re *regexp.Regexp) ([]string, error) {
	c := Follow(path)
	defer c.Close()
	return c.Wait(ctx, re)
}
