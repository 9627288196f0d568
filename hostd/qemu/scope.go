package qemu

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
)

// QEMUs in systemd scopes. Under systemd, gmigd's service cgroup holds
// every process it starts; stopping or restarting the service signals the
// whole cgroup (KillMode=control-group, the default), QEMUs included, at
// once and behind gmigd's back. A QEMU that gmigd starts as a systemd
// service therefore runs in a transient scope of its own (systemd-run
// --scope, which registers the scope and then execs QEMU in place, so the
// process gmigd waits for is QEMU itself): the service's stop reaches gmigd
// alone, which shuts its VMs down itself, and a gmigd that crashes and is
// restarted finds its VMs' QEMUs still running (hostd's recovery).

// Where the decision comes from.
const (
	// systemdBootedDir exists when systemd is the init system
	// (sd_booted(3): "checks whether the directory /run/systemd/system/
	// exists").
	systemdBootedDir = "/run/systemd/system"
	// envInvocationID is set by systemd for every process of a unit it
	// starts (systemd.exec(5), "$INVOCATION_ID").
	envInvocationID = "INVOCATION_ID"
	// ScopePrefix starts the name of every scope gmigd creates.
	ScopePrefix = "gmig-qemu-"
	// scopeSlice is where the scopes go: the slice systemd-machined and
	// libvirt put VMs in (systemd.special(7), "machine.slice").
	scopeSlice = "machine.slice"
)

// UseScopes reports whether QEMUs should run in scopes of their own: only
// when systemd is the init system, it started this process as a service,
// and this process is root (creating a scope in the system manager is
// otherwise up to polkit, and a refusal would fail every VM start).
func UseScopes() bool {
	fi, err := os.Stat(systemdBootedDir)
	return useScopes(err == nil && fi.IsDir(), os.Getenv(envInvocationID) != "", os.Geteuid())
}

func useScopes(booted, service bool, euid int) bool { return booted && service && euid == 0 }

// ScopeUnit returns a scope unit name for VM name: ScopePrefix, the name
// and a random suffix (a VM migrated between two gmigd on one host, or
// started again while its last scope is being collected, never clashes).
func ScopeUnit(name string) string {
	var b [4]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails (Go ≥ 1.24)
	return ScopePrefix + name + "-" + hex.EncodeToString(b[:]) + ".scope"
}

// inScope returns cmd run through systemdRun (the systemd-run binary) in
// the transient scope unit, with cmd's environment, directory, files and
// process attributes.
func inScope(cmd *exec.Cmd, systemdRun, unit string) *exec.Cmd {
	args := []string{systemdRun, "--scope", "--quiet", "--collect",
		"--unit=" + unit, "--slice=" + scopeSlice,
		"--description=gmig VM QEMU (started by gmigd)", "--", cmd.Path}
	args = append(args, cmd.Args[1:]...)
	wrapped := exec.Command(systemdRun)
	wrapped.Args = args
	wrapped.Env, wrapped.Dir = cmd.Env, cmd.Dir
	wrapped.Stdin, wrapped.Stdout, wrapped.Stderr = cmd.Stdin, cmd.Stdout, cmd.Stderr
	wrapped.ExtraFiles, wrapped.SysProcAttr = cmd.ExtraFiles, cmd.SysProcAttr
	return wrapped
}

// scoped wraps cmd in unit when unit is set.
func scoped(cmd *exec.Cmd, unit string) (*exec.Cmd, error) {
	if unit == "" {
		return cmd, nil
	}
	systemdRun, err := exec.LookPath("systemd-run")
	if err != nil {
		return nil, fmt.Errorf("qemu: running QEMU in scope %s: %w", unit, err)
	}
	return inScope(cmd, systemdRun, unit), nil
}
