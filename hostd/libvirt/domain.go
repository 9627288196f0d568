// Package libvirt is what gmigd knows of libvirt: the gmig part of a
// domain's XML (the vGPU in its <metadata>, the vfio-user device and QMP
// socket in its <qemu:commandline>), the records the qemu hook
// (`gmigd libvirt-hook`) keeps in gmigd's run directory, and virsh, through
// which `gmigd migrate` settles a migrated domain on the source
// (docs/operator-guide.md, "A VM started by libvirt").
//
// libvirt has no vfio-user device model: the vGPU goes in through QEMU
// command-line passthrough, and libvirt knows nothing of its state, so
// libvirt's own migration would move the guest's RAM and lose the device.
package libvirt

import (
	"encoding/json"
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/gmig-dev/gmig/hostd/qemu"
	"github.com/gmig-dev/gmig/internal/bytesize"
)

// XML namespaces.
const (
	// Namespace is gmig's metadata namespace in a domain's <metadata>.
	Namespace = "https://gmig.dev/xmlns/libvirt/1"
)

// DeviceID is the id the vGPU's vfio-user-pci device must have: the one
// gmigd adopts a VM by.
const DeviceID = qemu.DeviceID

// maxDomainXML bounds the domain XML read from a hook's stdin: gmig's own
// bound, far above any domain's XML (a few KiB).
const maxDomainXML = 4 << 20

// Errors callers branch on.
var (
	// ErrDomain is a gmig domain whose XML cannot work: what is wrong
	// and how to fix it follow.
	ErrDomain = errors.New("libvirt: the domain cannot run a gmig vGPU")
	// ErrXML is a document that is not a domain's XML.
	ErrXML = errors.New("libvirt: not a domain XML")
)

// VGPU is the <gmig:vgpu> element of a domain's metadata.
type VGPU struct {
	MemSize uint64 // mem="256M"; 0: gmigd's default
	Backend string // backend="software" or "cuda"; "": gmigd's default
}

// Domain is the part of a domain's XML gmig reads.
type Domain struct {
	Name string
	// VGPU is nil for a domain without gmig metadata: not gmig's.
	VGPU *VGPU
	// SharedMemfd: <memoryBacking> has <source type='memfd'/> and
	// <access mode='shared'/>.
	SharedMemfd bool
	// QEMUArgs are the <qemu:commandline> arguments, in order.
	QEMUArgs []string
}

type domainXML struct {
	XMLName  xml.Name `xml:"domain"`
	Name     string   `xml:"name"`
	Metadata struct {
		VGPU *struct {
			Mem     string `xml:"mem,attr"`
			Backend string `xml:"backend,attr"`
		} `xml:"https://gmig.dev/xmlns/libvirt/1 vgpu"`
	} `xml:"metadata"`
	MemoryBacking struct {
		Source struct {
			Type string `xml:"type,attr"`
		} `xml:"source"`
		Access struct {
			Mode string `xml:"mode,attr"`
		} `xml:"access"`
	} `xml:"memoryBacking"`
	CommandLine struct {
		Args []struct {
			Value string `xml:"value,attr"`
		} `xml:"http://libvirt.org/schemas/domain/qemu/1.0 arg"`
	} `xml:"http://libvirt.org/schemas/domain/qemu/1.0 commandline"`
}

// Parse reads a domain's XML (what libvirt gives a hook on stdin, or
// `virsh dumpxml`).
func Parse(r io.Reader) (Domain, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxDomainXML+1))
	if err != nil {
		return Domain{}, fmt.Errorf("libvirt: reading the domain XML: %w", err)
	}
	if len(b) > maxDomainXML {
		return Domain{}, fmt.Errorf("%w: longer than %d bytes", ErrXML, maxDomainXML)
	}
	var x domainXML
	if err := xml.Unmarshal(b, &x); err != nil {
		return Domain{}, fmt.Errorf("%w: %w", ErrXML, err)
	}
	if x.Name == "" {
		return Domain{}, fmt.Errorf("%w: no <name>", ErrXML)
	}
	d := Domain{
		Name:        x.Name,
		SharedMemfd: x.MemoryBacking.Source.Type == "memfd" && x.MemoryBacking.Access.Mode == "shared",
	}
	for _, a := range x.CommandLine.Args {
		d.QEMUArgs = append(d.QEMUArgs, a.Value)
	}
	if m := x.Metadata.VGPU; m != nil {
		d.VGPU = &VGPU{Backend: m.Backend}
		if m.Mem != "" {
			if d.VGPU.MemSize, err = bytesize.Parse(m.Mem); err != nil {
				return Domain{}, fmt.Errorf("%w: <gmig:vgpu mem=%q>: %w", ErrDomain, m.Mem, err)
			}
		}
	}
	return d, nil
}

// Sockets are the UNIX sockets a gmig domain's QEMU command line names.
type Sockets struct {
	VGPU string // the vfio-user-pci device's socket
	QMP  string // gmigd's own QMP monitor
}

// Check says what a gmig domain lacks to run and be adopted by gmigd, and
// returns the sockets its command line names.
func (d Domain) Check() (Sockets, error) {
	var s Sockets
	if !d.SharedMemfd {
		return s, fmt.Errorf("%w: guest RAM must be a shared memfd (gmigd cannot see other RAM): add <memoryBacking><source type='memfd'/><access mode='shared'/></memoryBacking>", ErrDomain)
	}
	args := d.QEMUArgs
	for i := 0; i+1 < len(args); i++ {
		switch strings.TrimLeft(args[i], "-") {
		case "device":
			if p, ok := vfioUserSocket(args[i+1]); ok {
				s.VGPU = p
			}
		case "qmp":
			if p, ok := strings.CutPrefix(args[i+1], "unix:"); ok {
				s.QMP, _, _ = strings.Cut(p, ",")
			}
		}
	}
	if s.VGPU == "" {
		return s, fmt.Errorf("%w: no <qemu:arg> pair -device {\"driver\":\"vfio-user-pci\",\"id\":%q,\"socket\":{\"path\":\"RUN_DIR/vgpu/%s.sock\",\"type\":\"unix\"}} in <qemu:commandline>", ErrDomain, DeviceID, d.Name)
	}
	if s.QMP == "" {
		return s, fmt.Errorf("%w: no <qemu:arg> pair -qmp unix:PATH,server=on,wait=off in <qemu:commandline> (gmigd's own monitor: libvirt keeps its own to itself)", ErrDomain)
	}
	return s, nil
}

// vfioUserSocket returns the socket path of a -device value that is the
// vGPU's vfio-user-pci device (id DeviceID), JSON or key=value form.
func vfioUserSocket(v string) (string, bool) {
	if strings.HasPrefix(strings.TrimSpace(v), "{") {
		var o struct {
			Driver string `json:"driver"`
			ID     string `json:"id"`
			Socket struct {
				Path string `json:"path"`
			} `json:"socket"`
		}
		if json.Unmarshal([]byte(v), &o) != nil || o.Driver != "vfio-user-pci" || o.ID != DeviceID {
			return "", false
		}
		return o.Socket.Path, o.Socket.Path != ""
	}
	kv := strings.Split(v, ",")
	if kv[0] != "vfio-user-pci" {
		return "", false
	}
	var id, path string
	for _, f := range kv[1:] {
		if x, ok := strings.CutPrefix(f, "id="); ok {
			id = x
		}
		if x, ok := strings.CutPrefix(f, "socket.path="); ok {
			path = x
		}
	}
	return path, id == DeviceID && path != ""
}
