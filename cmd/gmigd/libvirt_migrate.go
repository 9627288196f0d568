package main

import (
	"context"
	"errors"
	"flag"
	"strings"
	"time"

	"github.com/gmig-dev/gmig/hostd/libvirt"
)

// virshTimeout bounds one virsh command after a migration: gmig's own
// bound, far above the milliseconds undefine or autostart take.
const virshTimeout = 30 * time.Second

// libvirtSource is what gmigd migrate does with a VM that is a libvirt
// domain (the hook created its vGPU) once it runs at the destination.
type libvirtSource struct {
	policyFlag string
	uri        string
	destURI    string
	policy     libvirt.SourcePolicy
	isDomain   bool
	domainXML  string // the domain's definition, for destURI
}

func (l *libvirtSource) register(fs *flag.FlagSet) {
	fs.StringVar(&l.policyFlag, "libvirt-source", string(libvirt.Undefine),
		"a libvirt domain's fate on this host once the VM runs at the destination: undefine, disable-autostart or keep")
	fs.StringVar(&l.uri, "libvirt-uri", "", "libvirt's connection for virsh (default: virsh's, LIBVIRT_DEFAULT_URI or qemu:///system)")
	fs.StringVar(&l.destURI, "libvirt-dest-uri", "", "also define the domain in the destination's libvirt at this URI (e.g. qemu+ssh://host2/system), shut off there")
}

// parse checks the flags' values.
func (l *libvirtSource) parse() error {
	p, err := libvirt.ParseSourcePolicy(l.policyFlag)
	l.policy = p
	return err
}

// before notes whether VM name is a libvirt domain, before the migration:
// the hook's release, once the source's QEMU has quit, removes the record.
// With a destination URI it reads the domain's definition now, while it
// is certainly there; a failure refuses the migration before it begins.
func (l *libvirtSource) before(runDir, name string) error {
	l.isDomain = libvirt.Created(runDir, name)
	if !l.isDomain || l.destURI == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), virshTimeout)
	defer cancel()
	x, err := libvirt.Virsh{URI: l.uri}.DumpXML(ctx, name)
	l.domainXML = x
	return err
}

// after settles the domain of a VM that now runs at dest and returns what
// the operator is told ("" for a VM that is no libvirt domain).
func (l *libvirtSource) after(runDir, name, dest string) (string, error) {
	if !l.isDomain {
		return "", nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), virshTimeout)
	defer cancel()
	var said []string
	var errs []error
	if l.domainXML != "" {
		msg, err := libvirt.DefineAtDestination(ctx, libvirt.Virsh{URI: l.destURI}, l.destURI, name, l.domainXML)
		said, errs = append(said, msg), append(errs, err)
	}
	msg, err := libvirt.SettleSource(ctx, libvirt.Virsh{URI: l.uri}, runDir, l.policy, name, dest)
	said, errs = append(said, msg), append(errs, err)
	return strings.TrimSpace(strings.Join(said, "\n")), errors.Join(errs...)
}
