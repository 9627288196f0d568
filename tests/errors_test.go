package tests

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/hostd/qemu"
	"github.com/gmig-dev/gmig/internal/cluster"
)

// firmwareless is a QEMU root sharing root's programs and libraries but
// without its firmware: its QEMU exits at once, saying it could not load
// the PC BIOS.
func firmwareless(t *testing.T, root qemu.Root) qemu.Root {
	t.Helper()
	dir := t.TempDir()
	for _, d := range []string{"usr/bin", "usr/lib", "usr/lib64"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(d)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(filepath.Join(string(root), d), filepath.Join(dir, d)); err != nil {
			t.Fatal(err)
		}
	}
	for l, to := range map[string]string{"lib": "usr/lib", "lib64": "usr/lib64"} {
		if err := os.Symlink(to, filepath.Join(dir, l)); err != nil {
			t.Fatal(err)
		}
	}
	return qemu.Root(dir)
}

// restartWith restarts daemon i of the pair with another QEMU root.
func (p *pair) restartWith(ctx context.Context, i int, root qemu.Root) {
	p.t.Helper()
	p.d[i].Stop(10 * time.Second)
	d, err := cluster.Start(ctx, p.dir, p.d[i].Name, cluster.Options{Binary: p.bin, QEMURoot: string(root), Pool: "128M", LogLevel: "info"})
	if err != nil {
		p.t.Fatal(err)
	}
	p.d[i] = d
}

const noBIOS = "could not load PC BIOS"

// TestQEMUErrorsSayWhy: `vm start` of a QEMU that exits at once, and a
// migration whose destination QEMU exits at once, fail with QEMU's own
// reason (its last stderr lines), not a bare exit status. The VM's console
// log on the destination keeps that failed attempt when the VM lands there
// later, and the source's keeps its first stay when the VM comes back.
func TestQEMUErrorsSayWhy(t *testing.T) {
	e := needEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*e2eTimeout())
	defer cancel()
	const steps, fps = 1200, 20
	p := newPair(t, ctx, e)
	p.dumpOnFailure("vm")
	a := p.d[0]

	bad := e.vmSpec("pc", "intx", steps, fps)
	bad.Extra = append(bad.Extra, "-device", "no-such-device")
	_, err := a.Client.StartVM(hostd.StartVMRequest{Name: "bad", MemSize: e2eVGPUMem, QEMU: bad})
	if err == nil || !strings.Contains(err.Error(), "'no-such-device' is not a valid device model name") {
		t.Fatalf("vm start of a QEMU with an unknown device: %v, want QEMU's reason", err)
	}
	t.Logf("vm start: %v", err)
	if vms, _ := a.Client.ListVMs(); len(vms) != 0 {
		t.Fatalf("after the failed start A lists %+v", vms)
	}

	con := p.startVM("vm", e.vmSpec("pc", "intx", steps, fps))
	at := waitStep(ctx, t, con, steps/40)
	p.restartWith(ctx, 1, firmwareless(t, e.root))
	b := p.d[1]
	_, err = a.Client.Migrate(ctx, "vm", hostd.MigrateRequest{To: b.Addr}, nil)
	if err == nil || !strings.Contains(err.Error(), noBIOS) {
		t.Fatalf("migration to a destination whose QEMU cannot start: %v, want QEMU's reason (%s)", err, noBIOS)
	}
	t.Logf("migration: %v", err)
	at = waitStep(ctx, t, con, at+1) // the VM runs on at A

	p.restartWith(ctx, 1, e.root)
	b = p.d[1]
	if vms, err := b.Client.ListVMs(); err != nil || len(vms) != 0 {
		t.Fatalf("restarted, B lists %+v (%v): the failed landing left a VM behind", vms, err)
	}
	for _, hop := range [][2]*cluster.Daemon{{a, b}, {b, a}} {
		rep, err := hop[0].Client.Migrate(ctx, "vm", hostd.MigrateRequest{To: hop[1].Addr}, nil)
		if err != nil {
			t.Fatal(err)
		}
		checkMigrated(t, rep, hop[0], hop[1], "vm")
		c := cluster.Follow(hop[1].Console("vm"))
		at = waitStep(ctx, t, c, at+1)
		c.Close()
	}
	// B's console: the failed landing (QEMU's reason), then the VM's stay.
	// A's: the VM's first stay, then its return.
	for _, c := range []struct {
		d    *cluster.Daemon
		want []string
	}{
		{b, []string{hostd.ConsoleMarker, noBIOS, hostd.ConsoleMarker, "gmig: workload step"}},
		{a, []string{hostd.ConsoleMarker, "gmig: workload step", hostd.ConsoleMarker, "gmig: workload step"}},
	} {
		raw, err := os.ReadFile(c.d.Console("vm"))
		if err != nil {
			t.Fatal(err)
		}
		s := string(raw)
		for _, w := range c.want {
			i := strings.Index(s, w)
			if i < 0 {
				t.Errorf("gmigd %s's console of the VM lacks %q in order %q:\n%s", c.d.Name, w, c.want, tail(string(raw), 30))
				break
			}
			s = s[i+len(w):]
		}
	}
}
