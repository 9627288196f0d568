package libvirt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
)

// Domains is what gmigd asks of libvirt on a migration's source: small, so
// tests can fake it.
type Domains interface {
	// Undefine removes domain name's persistent definition (a running
	// domain becomes transient and is gone when its QEMU ends).
	Undefine(ctx context.Context, name string) error
	// DisableAutostart turns domain name's autostart off.
	DisableAutostart(ctx context.Context, name string) error
}

// Virsh is Domains through the virsh command.
type Virsh struct {
	// Path is the virsh program ("virsh": found in PATH).
	Path string
	// URI is the connection (-c); "" leaves it to virsh
	// (LIBVIRT_DEFAULT_URI, else qemu:///system as root).
	URI string
}

// ErrVirsh is a virsh command that failed; its output follows.
var ErrVirsh = errors.New("libvirt: virsh failed")

// Undefine runs `virsh undefine NAME`.
func (v Virsh) Undefine(ctx context.Context, name string) error {
	_, err := v.run(ctx, "undefine", name)
	return err
}

// DisableAutostart runs `virsh autostart --disable NAME`.
func (v Virsh) DisableAutostart(ctx context.Context, name string) error {
	_, err := v.run(ctx, "autostart", "--disable", name)
	return err
}

// DumpXML returns domain name's persistent definition (`virsh dumpxml
// --inactive NAME`).
func (v Virsh) DumpXML(ctx context.Context, name string) (string, error) {
	return v.run(ctx, "dumpxml", "--inactive", name)
}

// Define defines a domain from its XML (`virsh define FILE`, the XML
// written to a temporary file).
func (v Virsh) Define(ctx context.Context, domainXML string) error {
	f, err := os.CreateTemp("", "gmig-domain-*.xml")
	if err != nil {
		return fmt.Errorf("libvirt: define: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.WriteString(domainXML); err != nil {
		f.Close()
		return fmt.Errorf("libvirt: define: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("libvirt: define: %w", err)
	}
	_, err = v.run(ctx, "define", f.Name())
	return err
}

// run runs virsh with args and returns its standard output.
func (v Virsh) run(ctx context.Context, args ...string) (string, error) {
	if v.URI != "" {
		args = append([]string{"-c", v.URI}, args...)
	}
	path := v.Path
	if path == "" {
		path = "virsh"
	}
	var out, errOut bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("%w: %s %s: %w: %s", ErrVirsh, path, strings.Join(args, " "), err, strings.TrimSpace(errOut.String()+out.String()))
	}
	return out.String(), nil
}

// SourcePolicy is what becomes of a migrated VM's domain on the source.
type SourcePolicy string

// Source policies (gmigd migrate --libvirt-source).
const (
	// Undefine removes the domain: nothing on the source can start it
	// again (the default).
	Undefine SourcePolicy = "undefine"
	// DisableAutostart keeps the domain defined with autostart off; the
	// hook refuses to start it until the host reboots (NAME.moved).
	DisableAutostart SourcePolicy = "disable-autostart"
	// Keep leaves the domain as it is; the hook refuses to start it
	// until the host reboots (NAME.moved), and autostart then boots it.
	Keep SourcePolicy = "keep"
)

// ParseSourcePolicy parses a --libvirt-source value.
func ParseSourcePolicy(s string) (SourcePolicy, error) {
	switch p := SourcePolicy(s); p {
	case Undefine, DisableAutostart, Keep:
		return p, nil
	}
	return "", fmt.Errorf("libvirt: source policy %q: want %s, %s or %s", s, Undefine, DisableAutostart, Keep)
}

// DefineAtDestination defines domain name, whose XML is domainXML, in
// the destination's libvirt d, and returns a sentence for the operator.
// The domain stays shut off there: gmigd runs the VM, and the hook refuses
// to start the domain while it does.
func DefineAtDestination(ctx context.Context, d interface {
	Define(ctx context.Context, domainXML string) error
}, uri, name, domainXML string) (string, error) {
	if err := d.Define(ctx, domainXML); err != nil {
		return "", fmt.Errorf("libvirt: defining domain %s at %s: %w", name, uri, err)
	}
	return fmt.Sprintf("libvirt: domain %s defined at %s, shut off there: gmigd runs the VM (the hook refuses to start the domain while it does)", name, uri), nil
}

// SettleSource applies policy p to domain name on the source of a
// migration that moved it to dest, and returns a sentence for the
// operator saying where the VM runs and what became of the domain here.
func SettleSource(ctx context.Context, d Domains, runDir string, p SourcePolicy, name, dest string) (string, error) {
	where := fmt.Sprintf("the VM now runs at %s under gmigd (gmigd vm list there)", dest)
	switch p {
	case Undefine:
		if err := d.Undefine(ctx, name); err != nil {
			// The hook refuses to start it meanwhile.
			if merr := MarkMoved(runDir, name, dest); merr != nil {
				err = errors.Join(err, merr)
			}
			return "", fmt.Errorf("libvirt: %s: run `virsh undefine %s` here: %w", where, name, err)
		}
		return fmt.Sprintf("libvirt: domain %s undefined on this host; %s", name, where), nil
	case DisableAutostart:
		if err := MarkMoved(runDir, name, dest); err != nil {
			return "", err
		}
		if err := d.DisableAutostart(ctx, name); err != nil {
			return "", fmt.Errorf("libvirt: %s: run `virsh autostart --disable %s` here: %w", where, name, err)
		}
		return fmt.Sprintf("libvirt: domain %s kept on this host with autostart off (the hook refuses to start it until reboot); %s", name, where), nil
	case Keep:
		if err := MarkMoved(runDir, name, dest); err != nil {
			return "", err
		}
		return fmt.Sprintf("libvirt: domain %s kept on this host as it was (the hook refuses to start it until reboot; autostart would boot it after); %s", name, where), nil
	}
	return "", fmt.Errorf("libvirt: source policy %q: want %s, %s or %s", p, Undefine, DisableAutostart, Keep)
}
