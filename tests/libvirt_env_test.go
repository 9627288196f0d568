package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// libvirtd is a libvirt daemon of the provisioned root (scripts/provision.sh
// installs it), run as a test runs QEMU: started by the test, with a
// private configuration, state and sockets under dir, chrooted into the
// root inside a mount namespace of its own, so neither the root nor the
// host's /etc, /run and /var see anything of it. The test's directory is
// mounted at the same path inside, so the paths a domain names (kernel,
// gmigd's sockets) are the same for libvirt's QEMU and for gmigd.
type libvirtd struct {
	t    *testing.T
	dir  string
	uri  string // the connection virsh uses
	root string
	cmd  *exec.Cmd
	done chan struct{}
}

// libvirtdLaunch mounts what libvirtd needs in the root ($1), the shared
// directory ($2) at its own path and the daemon's private directories
// ($3) over the root's, then becomes libvirtd (unshare does not fork, nor
// does the exec: the test's process is libvirtd's).
const libvirtdLaunch = `set -e
R=$1 T=$2 L=$3
mount -t tmpfs tmpfs "$R/run"
mount -t tmpfs tmpfs "$R/tmp"
mount -t proc proc "$R/proc"
mount --rbind /dev "$R/dev"
mount --rbind /sys "$R/sys"
mkdir -p "$R$T"
mount --bind "$T" "$R$T"
mount --bind "$L/etc" "$R/etc/libvirt"
mount --bind "$L/lib" "$R/var/lib/libvirt"
mount --bind "$L/cache" "$R/var/cache/libvirt"
mount --bind "$L/log" "$R/var/log/libvirt"
exec chroot "$R" /usr/sbin/libvirtd -f /etc/libvirt/libvirtd.conf
`

// libvirtdQEMUConf runs QEMU as root with nothing libvirt would set up
// around it on a real host (cgroups, a mount namespace with a private
// /dev, seccomp, a security driver, virtlogd): the test machine and its
// chroot offer none of them.
const libvirtdQEMUConf = `user = "root"
group = "root"
dynamic_ownership = 0
remember_owner = 0
security_driver = "none"
namespaces = [ ]
cgroup_controllers = [ ]
seccomp_sandbox = 0
stdio_handler = "file"
`

// needLibvirt skips a test whose root has no libvirt.
func needLibvirt(t *testing.T, e env) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(string(e.root), "usr/sbin/libvirtd")); err != nil {
		t.Skipf("skipping: no libvirtd in the QEMU root (run `make provision`): %v", err)
	}
}

// startLibvirtd starts a libvirtd whose files are under shared/name, with
// hook as its qemu hook script (/etc/libvirt/hooks/qemu), and waits until
// it answers. It is stopped, its domains destroyed first, when the test
// ends.
func startLibvirtd(ctx context.Context, t *testing.T, e env, shared, name, hook string, id int) *libvirtd {
	t.Helper()
	dir := filepath.Join(shared, name)
	for _, d := range []string{"etc/hooks", "lib", "cache", "log", "sock"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sock := filepath.Join(dir, "sock")
	conf := fmt.Sprintf("unix_sock_dir = %q\nunix_sock_rw_perms = \"0700\"\nauth_unix_rw = \"none\"\nauth_unix_ro = \"none\"\n"+
		// Two daemons on one machine: libvirt refuses a migration to the
		// host it comes from, by host UUID.
		"host_uuid = \"00000000-0000-4000-8000-%012d\"\nlog_outputs = \"3:stderr\"\n", sock, id)
	files := map[string]string{"etc/libvirtd.conf": conf, "etc/qemu.conf": libvirtdQEMUConf, "etc/hooks/qemu": hook}
	for f, s := range files {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(s), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	logf, err := os.Create(filepath.Join(dir, "libvirtd.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command("unshare", "--mount", "--propagation", "private", "sh", "-c", libvirtdLaunch, "sh", string(e.root), shared, dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting libvirtd: %v", err)
	}
	l := &libvirtd{t: t, dir: dir, root: string(e.root), cmd: cmd, done: make(chan struct{}),
		uri: "qemu+unix:///system?socket=" + filepath.Join(sock, "libvirt-sock")}
	go func() { _ = cmd.Wait(); close(l.done) }()
	t.Cleanup(l.stop)
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		if _, err := l.virsh(ctx, "version"); err == nil {
			return l
		}
		select {
		case <-l.done:
			t.Fatalf("libvirtd %s exited:\n%s", name, l.logTail())
		case <-ctx.Done():
			t.Fatalf("libvirtd %s does not answer: %v\n%s", name, ctx.Err(), l.logTail())
		case <-tick.C:
		}
	}
}

// rootProgram is the command line that runs program prog of the root on
// the host, through the root's loader and libraries, as hostd/qemu runs
// QEMU.
func rootProgram(root, prog string) []string {
	return []string{filepath.Join(root, "lib64/ld-linux-x86-64.so.2"), "--library-path",
		filepath.Join(root, "lib/x86_64-linux-gnu") + ":" + filepath.Join(root, "usr/lib/x86_64-linux-gnu"),
		filepath.Join(root, prog)}
}

// virshScript is the root's virsh as a script: what `gmigd migrate` finds
// in PATH.
func virshScript(root string) string {
	return "#!/bin/sh\nexec " + strings.Join(rootProgram(root, "usr/bin/virsh"), " ") + " \"$@\"\n"
}

// virsh runs a virsh command against this daemon and returns its output
// (stdout and stderr).
func (l *libvirtd) virsh(ctx context.Context, args ...string) (string, error) {
	argv := append(rootProgram(l.root, "usr/bin/virsh"), "-c", l.uri)
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, argv[0], append(argv[1:], args...)...)
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

// stop destroys the daemon's running domains (their QEMUs outlive it) and
// ends it.
func (l *libvirtd) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if names, err := l.virsh(ctx, "list", "--name"); err == nil {
		for _, n := range strings.Fields(names) {
			if out, err := l.virsh(ctx, "destroy", n); err != nil {
				l.t.Logf("virsh destroy %s: %v: %s", n, err, out)
			}
		}
	}
	_ = l.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-l.done:
	case <-ctx.Done():
		_ = l.cmd.Process.Kill()
		<-l.done
	}
	if l.t.Failed() {
		l.t.Logf("libvirtd %s:\n%s", l.dir, l.logTail())
	}
}

func (l *libvirtd) logTail() string {
	b, _ := os.ReadFile(filepath.Join(l.dir, "libvirtd.log"))
	q, _ := os.ReadFile(filepath.Join(l.dir, "log", "qemu", "vm1.log"))
	return tail(string(b), 20) + "\n" + tail(string(q), 20)
}

// waitVirsh polls a virsh command until ok accepts its result.
func (l *libvirtd) waitVirsh(ctx context.Context, ok func(out string, err error) bool, args ...string) error {
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		out, err := l.virsh(ctx, args...)
		if ok(out, err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return errors.Join(ctx.Err(), fmt.Errorf("virsh %s: %q, %v", strings.Join(args, " "), out, err))
		case <-tick.C:
		}
	}
}
