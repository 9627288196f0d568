package libvirt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
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
	return v.run(ctx, "undefine", name)
}

// DisableAutostart runs `virsh autostart --disable NAME`.
func (v Virsh) DisableAutostart(ctx context.Context, name string) error {
	return v.run(ctx, "autostart", "--disable", name)
}

func (v Virsh) run(ctx context.Context, args ...string) error {
	if v.URI != "" {
		args = append([]string{"-c", v.URI}, args...)
	}
	path := v.Path
	if path == "" {
		path = "virsh"
	}
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: %s %s: %w: %s", ErrVirsh, path, strings.Join(args, " "), err, strings.TrimSpace(out.String()))
	}
	return nil
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
