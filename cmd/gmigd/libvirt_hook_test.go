package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/hostd/libvirt"
)

// fakeHookDaemon is gmigd as the hook sees it: vGPUs and VMs by name, and
// the calls made.
type fakeHookDaemon struct {
	runDir string
	vgpus  map[string]hostd.Info
	vms    map[string]hostd.VMInfo
	calls  []string
}

func newFakeHookDaemon(runDir string) *fakeHookDaemon {
	return &fakeHookDaemon{runDir: runDir, vgpus: map[string]hostd.Info{}, vms: map[string]hostd.VMInfo{}}
}

func (f *fakeHookDaemon) Create(req hostd.CreateRequest) (hostd.Info, error) {
	f.calls = append(f.calls, fmt.Sprintf("create %s %d %s", req.Name, req.MemSize, req.Backend))
	if _, ok := f.vgpus[req.Name]; ok {
		return hostd.Info{}, errors.New("hostd: POST /v1/vgpus: 409 Conflict: hostd: vGPU already exists")
	}
	info := hostd.Info{Name: req.Name, State: "live", Socket: filepath.Join(f.runDir, req.Name+".sock")}
	f.vgpus[req.Name] = info
	return info, nil
}

func (f *fakeHookDaemon) List() ([]hostd.Info, error) {
	var out []hostd.Info
	for _, v := range f.vgpus {
		out = append(out, v)
	}
	return out, nil
}

func (f *fakeHookDaemon) Destroy(name string) error {
	f.calls = append(f.calls, "destroy "+name)
	delete(f.vgpus, name)
	return nil
}

func (f *fakeHookDaemon) ListVMs() ([]hostd.VMInfo, error) {
	var out []hostd.VMInfo
	for _, v := range f.vms {
		out = append(out, v)
	}
	return out, nil
}

func (f *fakeHookDaemon) AdoptVM(name string, req hostd.AdoptRequest) (hostd.VMInfo, error) {
	f.calls = append(f.calls, fmt.Sprintf("adopt %s %s %s", name, req.QMP, req.VGPU))
	vm := hostd.VMInfo{Name: name, State: "running", VGPU: req.VGPU, Adopted: true}
	f.vms[name] = vm
	return vm, nil
}

func (f *fakeHookDaemon) StopVM(name string) error {
	f.calls = append(f.calls, "stop "+name)
	delete(f.vms, name)
	return nil
}

// hookDomain is a gmig domain whose vGPU socket is where the fake daemon
// serves it.
func hookDomain(runDir string) string {
	return `<domain type='kvm' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>vm1</name>
  <metadata><gmig:vgpu xmlns:gmig="https://gmig.dev/xmlns/libvirt/1" mem="32M"/></metadata>
  <memoryBacking><source type='memfd'/><access mode='shared'/></memoryBacking>
  <qemu:commandline>
    <qemu:arg value='-device'/>
    <qemu:arg value='{"driver":"vfio-user-pci","id":"gpu0","socket":{"path":"` + runDir + `/vm1.sock","type":"unix"}}'/>
    <qemu:arg value='-qmp'/>
    <qemu:arg value='unix:` + runDir + `/vm1.qmp,server=on,wait=off'/>
  </qemu:commandline>
</domain>`
}

// TestLibvirtHookLifecycle: prepare creates the vGPU the metadata asks
// for, started adopts QEMU by the domain's QMP socket, release releases
// both and the hook's record.
func TestLibvirtHookLifecycle(t *testing.T) {
	dir := t.TempDir()
	f := newFakeHookDaemon(dir)
	h := libvirtHook{runDir: dir, daemon: f}
	for _, op := range []string{"prepare", "start", "started"} {
		if err := h.run(op, strings.NewReader(hookDomain(dir))); err != nil {
			t.Fatalf("%s: %v", op, err)
		}
	}
	if !libvirt.Created(dir, "vm1") {
		t.Fatal("no record of the vGPU the hook created")
	}
	if err := h.run("release", strings.NewReader(hookDomain(dir))); err != nil {
		t.Fatal(err)
	}
	want := []string{"create vm1 33554432 ", "adopt vm1 " + dir + "/vm1.qmp vm1", "stop vm1", "destroy vm1"}
	if !slices.Equal(f.calls, want) {
		t.Fatalf("calls\n%q\nwant\n%q", f.calls, want)
	}
	if libvirt.Created(dir, "vm1") || len(f.vgpus) != 0 || len(f.vms) != 0 {
		t.Fatalf("after release: record %v, vGPUs %v, VMs %v", libvirt.Created(dir, "vm1"), f.vgpus, f.vms)
	}
}

// TestLibvirtHookLeavesOthersAlone: release touches nothing the hook did
// not make (a VM a migration brought here, whose start libvirt refused),
// nor a VM in a migration; a domain without gmig metadata is no concern
// of the hook's, whatever the operation.
func TestLibvirtHookLeavesOthersAlone(t *testing.T) {
	dir := t.TempDir()
	f := newFakeHookDaemon(dir)
	f.vgpus["vm1"] = hostd.Info{Name: "vm1", State: "live"}
	f.vms["vm1"] = hostd.VMInfo{Name: "vm1", State: "running", VGPU: "vm1"}
	h := libvirtHook{runDir: dir, daemon: f}
	if err := h.run("prepare", strings.NewReader(hookDomain(dir))); !errors.Is(err, errHookRefused) || !strings.Contains(err.Error(), "VM vm1 already runs here under gmigd") {
		t.Fatalf("prepare beside a VM of the same name: %v", err)
	}
	delete(f.vms, "vm1")
	if err := h.run("prepare", strings.NewReader(hookDomain(dir))); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("prepare beside a vGPU of the same name: %v", err)
	}
	f.vms["vm1"] = hostd.VMInfo{Name: "vm1", State: "running", VGPU: "vm1"}
	if err := h.run("release", strings.NewReader(hookDomain(dir))); err != nil {
		t.Fatal(err)
	}
	if len(f.vgpus) != 1 || len(f.vms) != 1 {
		t.Fatalf("release removed what the hook did not make: %v %v", f.vgpus, f.vms)
	}
	if err := libvirt.MarkCreated(dir, "vm1"); err != nil {
		t.Fatal(err)
	}
	f.vms["vm1"] = hostd.VMInfo{Name: "vm1", State: "migrating", Adopted: true}
	f.vgpus["vm1"] = hostd.Info{Name: "vm1", State: "migrating"}
	if err := h.run("release", strings.NewReader(hookDomain(dir))); err != nil {
		t.Fatal(err)
	}
	if len(f.vgpus) != 1 || len(f.vms) != 1 {
		t.Fatalf("release ended a migration: %v %v", f.vgpus, f.vms)
	}
	other := `<domain type='kvm'><name>web</name></domain>`
	for _, op := range []string{"prepare", "started", "release", "migrate", "restore"} {
		if err := h.run(op, strings.NewReader(other)); err != nil {
			t.Errorf("%s of a domain without a vGPU: %v", op, err)
		}
	}
	if want := []string{"create vm1 33554432 "}; !slices.Equal(f.calls, want) {
		t.Fatalf("calls %q, want %q", f.calls, want)
	}
}

// TestLibvirtHookRefuses: virsh migrate and restore of a gmig domain, a
// domain that moved away, a domain that names another socket than the
// one gmigd serves its vGPU on (the vGPU made is removed again), and a
// domain gmigd could not adopt, each with the reason.
func TestLibvirtHookRefuses(t *testing.T) {
	dir := t.TempDir()
	f := newFakeHookDaemon(dir)
	h := libvirtHook{runDir: dir, daemon: f}
	x := hookDomain(dir)
	for op, want := range map[string]string{
		"migrate": "domain vm1 has a gmig vGPU; virsh migrate would lose its device state; run: gmigd migrate vm1 --to HOST:PORT",
		"restore": "a saved image does not hold its device state",
	} {
		if err := h.run(op, strings.NewReader(x)); !errors.Is(err, errHookRefused) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want %q", op, err, want)
		}
	}
	wrong := strings.Replace(x, dir+"/vm1.sock", "/elsewhere/vm1.sock", 1)
	if err := h.run("prepare", strings.NewReader(wrong)); !errors.Is(err, errHookRefused) || !strings.Contains(err.Error(), dir+"/vm1.sock") {
		t.Errorf("prepare with another socket: %v", err)
	}
	if len(f.vgpus) != 0 || libvirt.Created(dir, "vm1") {
		t.Errorf("a refused prepare left vGPUs %v (record %v)", f.vgpus, libvirt.Created(dir, "vm1"))
	}
	private := strings.Replace(x, "shared", "private", 1)
	if err := h.run("prepare", strings.NewReader(private)); !errors.Is(err, libvirt.ErrDomain) {
		t.Errorf("prepare with private RAM: %v", err)
	}
	if err := libvirt.MarkMoved(dir, "vm1", "10.0.0.12:7010"); err != nil {
		t.Fatal(err)
	}
	if err := h.run("prepare", strings.NewReader(x)); !errors.Is(err, errHookRefused) || !strings.Contains(err.Error(), "moved to 10.0.0.12:7010") {
		t.Errorf("prepare of a domain that moved away: %v", err)
	}
	if len(f.vgpus) != 0 {
		t.Errorf("vGPUs %v", f.vgpus)
	}
}

// TestLibvirtCommandLines: the hook takes libvirt's arguments (two to
// four) and refuses others; gmigd migrate refuses an unknown
// --libvirt-source before anything is done.
func TestLibvirtCommandLines(t *testing.T) {
	var ue *usageError
	if err := cmdLibvirtHook([]string{"vm1"}); !errors.As(err, &ue) {
		t.Fatalf("one argument: %v", err)
	}
	if err := cmdLibvirtHook([]string{"vm1", "a", "b", "c", "d"}); !errors.As(err, &ue) {
		t.Fatalf("five arguments: %v", err)
	}
	err := cmdMigrate([]string{"vm1", "--to", "127.0.0.1:1", "--libvirt-source", "destroy", "-run-dir", t.TempDir()})
	if !errors.As(err, &ue) || !strings.Contains(err.Error(), "destroy") {
		t.Fatalf("--libvirt-source destroy: %v", err)
	}
}
