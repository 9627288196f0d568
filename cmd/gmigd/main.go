// Command gmigd is the gmig host daemon and its operator CLI.
//
//	gmigd serve   [flags]            run the daemon: a pool, vGPUs, vfio-user sockets, control API, migrations
//	gmigd vgpu    create|list|show|rm   manage vGPUs of a running daemon
//	gmigd vm      start|adopt|list|show|stop   manage VMs of a running daemon
//	gmigd migrate VM --to HOST:PORT  live-migrate a VM and its vGPU to another gmigd
//	gmigd migrate-status [ID|VM]     migrations in flight and past ones
//	gmigd migrate-cancel ID|VM       cancel a migration before its commit (it rolls back)
//	gmigd migrate-set-bandwidth ID|VM RATE  change a migration's bandwidth limit
//	gmigd guest  [flags]            the built-in guest simulator against a vGPU socket
//	gmigd demo   [flags]            two gmigd and a Linux VM under QEMU: a live migration and its report (-sim: in-process)
//	gmigd certs  -out DIR -hosts a,b  a test CA and certificates for mutual TLS between gmigd
//	gmigd version                    the module version and VCS revision gmigd was built from
//
// Every command takes its flags before, between or after its arguments
// ("--" ends them) and prints its help with -h. See docs/operator-guide.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/internal/keepmem"
	"github.com/gmig-dev/gmig/orchestrator"
)

const usage = `usage: gmigd <command> [flags] [arguments]

commands:
  serve    run the daemon (pool, vGPUs, vfio-user sockets, control API, migrations)
  vgpu     create, list, show or remove vGPUs of a running daemon
  vm       start, adopt, list, show or stop VMs of a running daemon
  migrate  live-migrate a VM and its vGPU to another gmigd (--dry-run: check only)
  migrate-status         migrations in flight and past ones: phase, bytes, rates, estimate, outcome
  migrate-cancel         cancel a migration before its commit: it rolls back, the VM runs on here
  migrate-set-bandwidth  change a migration's bandwidth limit while it runs
  guest    run the built-in guest simulator against a vGPU's vfio-user socket
  demo     two gmigd and a Linux VM under QEMU: a live migration and its downtime report (-sim: in-process)
  status   this host's GPUs (NVML) and whether the cuda back end can run
  certs    make a test CA and host certificates for mutual TLS between gmigd (testing only)
  version  the module version and VCS revision gmigd was built from
  libvirt-hook  libvirt's qemu hook for domains with a gmig vGPU (/etc/libvirt/hooks/qemu)

Run 'gmigd <command> -h' (or 'gmigd help <command>') for a command's flags.
`

// Exit statuses of every command (docs/operator-guide.md, "Exit statuses").
const (
	exitOK     = 0
	exitFailed = 1 // any error the codes below do not name
	// exitUsage: the command line was refused before anything was done;
	// 2 as the flag package's ExitOnError and the shells' builtins use.
	exitUsage = 2
	// gmigd migrate's failures, one per orchestrator outcome error (the
	// migrate API's "outcome"): gmigd's own numbering.
	exitRolledBack     = 3 // orchestrator.ErrRolledBack: the VM runs on at the source
	exitNotResumed     = 4 // orchestrator.ErrNotResumed: the source could not resume the VM
	exitOutcomeUnknown = 5 // orchestrator.ErrOutcomeUnknown: paused at the source until the destination answers
)

// commands are gmigd's commands by name.
var commands = map[string]func([]string) error{
	"serve":                 cmdServe,
	"vgpu":                  cmdVGPU,
	"vm":                    cmdVM,
	"migrate":               cmdMigrate,
	"migrate-status":        cmdMigrateStatus,
	"migrate-cancel":        cmdMigrateCancel,
	"migrate-set-bandwidth": cmdMigrateSetBandwidth,
	"guest":                 cmdGuest,
	"demo":                  cmdDemo,
	"status":                cmdStatus,
	"certs":                 cmdCerts,
	"version":               cmdVersion,
}

func main() {
	if len(os.Args) > 1 && (os.Args[1] == "serve" || os.Args[1] == "demo") {
		keepmem.Ensure() // the daemon's stop phases fault no freed heap back in
	}
	os.Exit(run(os.Args[1:]))
}

// run runs the command line args (without the program's name) and returns
// its exit status.
func run(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return exitUsage
	}
	name, args := args[0], args[1:]
	switch {
	case name == "help" && len(args) == 1:
		return run([]string{args[0], "-h"})
	case name == "-h" || name == "--help" || name == "help" && len(args) == 0:
		fmt.Print(usage)
		return exitOK
	}
	cmd, ok := commands[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "gmigd: unknown command %q\n\n%s", name, usage)
		return exitUsage
	}
	return exitStatus(name, cmd(args), os.Stderr)
}

// exitStatus reports command name's error on stderr (with the command's
// usage if the command line was refused) and returns the exit status for
// it.
func exitStatus(name string, err error, stderr io.Writer) int {
	var ue *usageError
	var se *subcommandError
	if errors.As(err, &se) {
		name = se.name
	}
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "gmigd %s: %v\n\n", ue.fs.Name(), ue.err)
		ue.printUsage(stderr)
		return exitUsage
	case errors.Is(err, hostd.ErrNoDaemon):
		fmt.Fprintf(stderr, "gmigd %s: %v; is gmigd serve running there (-run-dir)?\n", name, err)
		return exitFailed
	}
	fmt.Fprintf(stderr, "gmigd %s: %v\n", name, err)
	switch {
	case errors.Is(err, orchestrator.ErrNotResumed):
		return exitNotResumed
	case errors.Is(err, orchestrator.ErrRolledBack):
		return exitRolledBack
	case errors.Is(err, orchestrator.ErrOutcomeUnknown):
		return exitOutcomeUnknown
	}
	return exitFailed
}
