package libvirt

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// The hook and `gmigd migrate` keep two records per domain in gmigd's run
// directory, under RUN_DIR/libvirt/ (a tmpfs under systemd: gone at
// reboot, as the domains' QEMUs are):
//
//   - NAME.hook: the hook created the domain's vGPU (prepare); only then
//     does it remove the vGPU at release, and `gmigd migrate` knows the VM
//     is a libvirt domain. Removed at release.
//   - NAME.moved: `gmigd migrate` moved the VM away and left the domain
//     defined here (--libvirt-source=disable-autostart or keep); it holds
//     the destination. The hook refuses to start the domain while it
//     exists: the VM runs there, on the same disks.

// Dir is where the records of run directory runDir are.
func Dir(runDir string) string { return filepath.Join(runDir, "libvirt") }

func hookRecord(runDir, name string) string  { return filepath.Join(Dir(runDir), name+".hook") }
func movedRecord(runDir, name string) string { return filepath.Join(Dir(runDir), name+".moved") }

// MarkCreated records that the hook created domain name's vGPU.
func MarkCreated(runDir, name string) error { return write(hookRecord(runDir, name), "") }

// Created reports whether the hook created domain name's vGPU (and has
// not yet released it).
func Created(runDir, name string) bool { return exists(hookRecord(runDir, name)) }

// Released removes the hook's record of domain name.
func Released(runDir, name string) error { return remove(hookRecord(runDir, name)) }

// MarkMoved records that VM name now runs at dest, its domain still
// defined here.
func MarkMoved(runDir, name, dest string) error { return write(movedRecord(runDir, name), dest+"\n") }

// Moved returns where VM name was moved to, if it was (MarkMoved).
func Moved(runDir, name string) (dest string, ok bool) {
	b, err := os.ReadFile(movedRecord(runDir, name))
	if err != nil {
		return "", false
	}
	return strings.TrimSpace(string(b)), true
}

func write(path, s string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o750); err != nil {
		return fmt.Errorf("libvirt: record: %w", err)
	}
	if err := os.WriteFile(path, []byte(s), 0o640); err != nil {
		return fmt.Errorf("libvirt: record: %w", err)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func remove(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("libvirt: record: %w", err)
	}
	return nil
}
