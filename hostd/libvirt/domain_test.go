package libvirt

import (
	"errors"
	"strings"
	"testing"
)

const gmigDomain = `<domain type='qemu' xmlns:qemu='http://libvirt.org/schemas/domain/qemu/1.0'>
  <name>vm1</name>
  <metadata>
    <gmig:vgpu xmlns:gmig="https://gmig.dev/xmlns/libvirt/1" mem="256M" backend="cuda"/>
  </metadata>
  <memory unit='GiB'>4</memory>
  <memoryBacking><source type='memfd'/><access mode='shared'/></memoryBacking>
  <qemu:commandline>
    <qemu:arg value='-device'/>
    <qemu:arg value='{"driver":"vfio-user-pci","id":"gpu0","socket":{"path":"/run/gmig/vm1.sock","type":"unix"}}'/>
    <qemu:arg value='-qmp'/>
    <qemu:arg value='unix:/run/gmig/vm1.qmp,server=on,wait=off'/>
  </qemu:commandline>
</domain>`

func TestParseGmigDomain(t *testing.T) {
	d, err := Parse(strings.NewReader(gmigDomain))
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "vm1" || d.VGPU == nil || d.VGPU.MemSize != 256<<20 || d.VGPU.Backend != "cuda" || !d.SharedMemfd {
		t.Fatalf("parsed %+v (vGPU %+v)", d, d.VGPU)
	}
	s, err := d.Check()
	if err != nil {
		t.Fatal(err)
	}
	if s.VGPU != "/run/gmig/vm1.sock" || s.QMP != "/run/gmig/vm1.qmp" {
		t.Fatalf("sockets %+v", s)
	}
}

// TestParseKeyValueDevice: the device in QEMU's key=value form, a prefix
// other than gmig: and no size (gmigd's default).
func TestParseKeyValueDevice(t *testing.T) {
	x := strings.NewReplacer(`{"driver":"vfio-user-pci","id":"gpu0","socket":{"path":"/run/gmig/vm1.sock","type":"unix"}}`,
		`vfio-user-pci,id=gpu0,socket.type=unix,socket.path=/r/vm1.sock`,
		`gmig:vgpu xmlns:gmig`, `g:vgpu xmlns:g`, ` mem="256M"`, ``).Replace(gmigDomain)
	d, err := Parse(strings.NewReader(x))
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.Check()
	if err != nil || s.VGPU != "/r/vm1.sock" || d.VGPU.MemSize != 0 {
		t.Fatalf("sockets %+v, vGPU %+v: %v", s, d.VGPU, err)
	}
}

func TestParseOtherDomain(t *testing.T) {
	d, err := Parse(strings.NewReader(`<domain type='kvm'><name>web</name><metadata><x:y xmlns:x="urn:other"/></metadata></domain>`))
	if err != nil || d.VGPU != nil || d.Name != "web" {
		t.Fatalf("a domain without gmig metadata: %+v, %v", d, err)
	}
}

func TestParseRefuses(t *testing.T) {
	for name, x := range map[string]string{
		"not XML":  "hello",
		"no name":  "<domain type='kvm'></domain>",
		"bad size": strings.Replace(gmigDomain, `mem="256M"`, `mem="lots"`, 1),
		"too long": "<domain>" + strings.Repeat(" ", maxDomainXML) + "</domain>",
	} {
		if _, err := Parse(strings.NewReader(x)); !errors.Is(err, ErrXML) && !errors.Is(err, ErrDomain) {
			t.Errorf("%s: %v, want ErrXML or ErrDomain", name, err)
		}
	}
}

// TestCheckSaysWhatIsMissing: each thing a gmig domain needs, taken away,
// is named in the error.
func TestCheckSaysWhatIsMissing(t *testing.T) {
	for name, c := range map[string]struct{ from, to, want string }{
		"private RAM": {`<access mode='shared'/>`, `<access mode='private'/>`, "shared memfd"},
		"no memfd":    {`<source type='memfd'/>`, `<source type='file'/>`, "shared memfd"},
		"no device":   {`"driver":"vfio-user-pci"`, `"driver":"virtio-gpu-pci"`, "vfio-user-pci"},
		"other id":    {`"id":"gpu0"`, `"id":"gpu1"`, `"id":"gpu0"`},
		"no QMP":      {`<qemu:arg value='-qmp'/>`, `<qemu:arg value='-name'/>`, "-qmp unix:PATH"},
		"no unix QMP": {`unix:/run/gmig/vm1.qmp`, `tcp:127.0.0.1:4444`, "-qmp unix:PATH"},
	} {
		d, err := Parse(strings.NewReader(strings.Replace(gmigDomain, c.from, c.to, 1)))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if _, err := d.Check(); !errors.Is(err, ErrDomain) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want ErrDomain naming %q", name, err, c.want)
		}
	}
}
