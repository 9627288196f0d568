package tests

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/internal/cluster"
)

// libvirtDomain is docs/operator-guide.md's domain ("A VM started by
// libvirt") for this test: name, vGPU memory, RAM in MiB, kernel, initrd,
// kernel command line, the vGPU's socket, gmigd's QMP socket and the
// console file. The console goes in through <qemu:commandline> too: a
// libvirt <serial> file is passed to QEMU as a descriptor, which a
// migration's destination cannot be given.
const libvirtDomain = `<domain type='qemu' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>%s</name>
  <metadata>
    <gmig:vgpu xmlns:gmig="https://gmig.dev/xmlns/libvirt/1" mem="%s" backend="software"/>
  </metadata>
  <memory unit='MiB'>%d</memory>
  <memoryBacking>
    <source type='memfd'/>
    <access mode='shared'/>
  </memoryBacking>
  <vcpu>1</vcpu>
  <os>
    <type arch='x86_64' machine='pc'>hvm</type>
    <kernel>%s</kernel>
    <initrd>%s</initrd>
    <cmdline>%s</cmdline>
  </os>
  <qemu:commandline>
    <qemu:arg value='-device'/>
    <qemu:arg value='{"driver":"vfio-user-pci","id":"gpu0","socket":{"path":"%s","type":"unix"}}'/>
    <qemu:arg value='-qmp'/>
    <qemu:arg value='unix:%s,server=on,wait=off'/>
    <qemu:arg value='-chardev'/>
    <qemu:arg value='file,id=console,path=%s,append=on'/>
    <qemu:arg value='-serial'/>
    <qemu:arg value='chardev:console'/>
  </qemu:commandline>
</domain>
`

// TestLibvirtMigrate runs docs/operator-guide.md's libvirt walk-through
// against two real libvirt daemons, each beside a gmigd: the hook makes
// the domain's vGPU and adopts its QEMU when `virsh start` runs it;
// `virsh migrate` to the other host is refused with what to run instead,
// and the VM runs on; `gmigd migrate` moves it in the middle of the
// guest's self-checking workload, undefines the domain on the source and
// says where the VM runs, and defines the domain, shut off, in the
// destination's libvirt, which the hook keeps from starting it beside
// gmigd's copy; the source's libvirt can no longer start it; the
// guest finishes on the destination with the digest of a run that never
// moved.
func TestLibvirtMigrate(t *testing.T) {
	e := needEnv(t)
	needLibvirt(t, e)
	ctx, cancel := context.WithTimeout(context.Background(), 2*e2eTimeout())
	defer cancel()
	p := newPair(t, ctx, e)
	p.dumpOnFailure("vm1")
	a, b := p.d[0], p.d[1]
	const steps, fps = 600, 20
	want := referenceLater(ctx, t, steps)

	// What libvirt's QEMU reads must be inside the test's directory, the
	// one directory the daemons' chroots share with the host.
	bin := filepath.Join(p.dir, "bin")
	gmigd := filepath.Join(bin, "gmigd")
	copyFile(t, p.bin, gmigd)
	kernel, initrd := filepath.Join(p.dir, "vmlinuz"), filepath.Join(p.dir, "initramfs.cpio")
	copyFile(t, e.kernel, kernel)
	copyFile(t, e.initrd, initrd)
	if err := os.WriteFile(filepath.Join(bin, "virsh"), []byte(virshScript(string(e.root))), 0o755); err != nil {
		t.Fatal(err)
	}
	hook := func(d *cluster.Daemon) string {
		return fmt.Sprintf("#!/bin/sh\nexec %s libvirt-hook -run-dir %s \"$@\"\n", gmigd, d.RunDir)
	}
	lvA := startLibvirtd(ctx, t, e, p.dir, "libvirt-a", hook(a), 1)
	lvB := startLibvirtd(ctx, t, e, p.dir, "libvirt-b", hook(b), 2)

	// Where gmigd serves a vGPU named vm1: the path the domain must name.
	probe, err := a.Client.Create(hostd.CreateRequest{Name: "vm1", MemSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Client.Destroy("vm1"); err != nil {
		t.Fatal(err)
	}
	console := filepath.Join(p.dir, "vm1.console")
	xmlPath := filepath.Join(p.dir, "vm1.xml")
	cmdline := e.vmSpec("pc", "intx", steps, fps).Append
	domain := fmt.Sprintf(libvirtDomain, "vm1", "16M", 512, kernel, initrd, cmdline, probe.Socket,
		filepath.Join(p.dir, "vm1.qmp"), console)
	if err := os.WriteFile(xmlPath, []byte(domain), 0o644); err != nil {
		t.Fatal(err)
	}
	virsh := func(l *libvirtd, args ...string) string {
		t.Helper()
		out, err := l.virsh(ctx, args...)
		if err != nil {
			t.Fatalf("virsh %s: %v: %s", strings.Join(args, " "), err, out)
		}
		t.Logf("virsh %s: %s", strings.Join(args, " "), out)
		return out
	}
	virsh(lvA, "define", xmlPath)
	virsh(lvA, "start", "vm1")
	con := cluster.Follow(console)
	t.Cleanup(con.Close)

	list, err := exec.CommandContext(ctx, gmigd, "vm", "list", "-run-dir", a.RunDir).CombinedOutput()
	t.Logf("gmigd vm list:\n%s", list)
	if err != nil || !regexp.MustCompile(`(?m)^vm1 +qemu +running +vm1 +\d+ +\(adopted command line\)`).Match(list) {
		t.Fatalf("after virsh start, gmigd vm list: %v, want vm1 adopted and running", err)
	}
	at := waitStep(ctx, t, con, steps/10)

	out, err := lvA.virsh(ctx, "migrate", "--live", "vm1", lvB.uri)
	t.Logf("virsh migrate --live vm1 (at step %d): %v: %s", at, err, out)
	if err == nil || !strings.Contains(out, "virsh migrate would lose its device state; run: gmigd migrate vm1 --to HOST:PORT") {
		t.Fatalf("virsh migrate not refused with the hook's reason: %v: %s", err, out)
	}
	if st := virsh(lvA, "domstate", "vm1"); st != "running" {
		t.Fatalf("after the refused virsh migrate the domain is %q", st)
	}

	var mout bytes.Buffer
	mig := exec.CommandContext(ctx, gmigd, "migrate", "vm1", "--to", b.Addr, "--libvirt-dest-uri", lvB.uri, "-run-dir", a.RunDir)
	mig.Env = append(os.Environ(), "PATH="+bin+":"+os.Getenv("PATH"), "LIBVIRT_DEFAULT_URI="+lvA.uri)
	mig.Stdout, mig.Stderr = &mout, &mout
	err = mig.Run()
	t.Logf("gmigd migrate vm1 --to %s: %v\n%s", b.Addr, err, mout.String())
	if err != nil {
		t.Fatal(err)
	}
	if w := "libvirt: domain vm1 undefined on this host; the VM now runs at " + b.Addr; !strings.Contains(mout.String(), w) {
		t.Fatalf("gmigd migrate does not say %q", w)
	}
	if vms, err := b.Client.ListVMs(); err != nil || len(vms) != 1 || vms[0].Name != "vm1" || vms[0].State != "running" {
		t.Fatalf("the destination lists %+v (%v)", vms, err)
	}
	// The destination's libvirt knows the domain, shut off, and cannot
	// start a second copy beside the one gmigd runs.
	if w := "libvirt: domain vm1 defined at " + lvB.uri + ", shut off there"; !strings.Contains(mout.String(), w) {
		t.Fatalf("gmigd migrate does not say %q", w)
	}
	if st := virsh(lvB, "domstate", "vm1"); st != "shut off" {
		t.Fatalf("the domain at the destination is %q, want shut off", st)
	}
	if out, err := lvB.virsh(ctx, "start", "vm1"); err == nil || !strings.Contains(out, "VM vm1 already runs here under gmigd") {
		t.Fatalf("virsh start vm1 at the destination while gmigd runs it: %v: %s", err, out)
	} else {
		t.Logf("virsh start vm1 at the destination: %v: %s", err, out)
	}
	if vms, err := a.Client.ListVMs(); err != nil || len(vms) != 0 {
		t.Fatalf("the source still lists %+v (%v)", vms, err)
	}
	// libvirt sees its QEMU quit; the transient domain the undefine left
	// is gone with it.
	if err := lvA.waitVirsh(ctx, func(out string, err error) bool { return err == nil && !strings.Contains(out, "vm1") }, "list", "--all"); err != nil {
		t.Fatal(err)
	}
	if out, err := lvA.virsh(ctx, "start", "vm1"); err == nil || !strings.Contains(out, "failed to get domain 'vm1'") {
		t.Fatalf("virsh start vm1 on the source after the migration: %v: %s", err, out)
	} else {
		t.Logf("virsh start vm1 on the source: %v: %s", err, out)
	}
	if got, w := waitEnd(ctx, t, con), <-want; got != w {
		t.Fatalf("the guest's digest %s after the migration, want %s (a run that never moved)", got, w)
	}
	if list, err := a.Client.List(); err != nil || len(list) != 0 {
		t.Fatalf("vGPUs left on the source: %+v (%v)", list, err)
	}

	// Stopped under gmigd at the destination, the domain may start there
	// under libvirt — given the same run directory on both hosts, which
	// these two daemons do not have: the hook says so, and keeps nothing.
	if out, err := exec.CommandContext(ctx, gmigd, "vm", "stop", "vm1", "-run-dir", b.RunDir).CombinedOutput(); err != nil {
		t.Fatalf("gmigd vm stop vm1 at the destination: %v: %s", err, out)
	}
	out, err = lvB.virsh(ctx, "start", "vm1")
	t.Logf("virsh start vm1 at the destination after gmigd vm stop: %v: %s", err, out)
	bSocket := strings.Replace(probe.Socket, a.RunDir, b.RunDir, 1)
	if w := "names socket " + probe.Socket + ", but gmigd serves its vGPU on " + bSocket; err == nil || !strings.Contains(out, w) {
		t.Fatalf("virsh start at the destination with another run directory: %v: %s", err, out)
	}
	if list, err := b.Client.List(); err != nil || len(list) != 0 {
		t.Fatalf("vGPUs left at the destination after the refused start: %+v (%v)", list, err)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	fi, err := src.Stat()
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, fi.Mode().Perm())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
