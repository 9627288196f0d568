// Command gmigd is the gmig host daemon and its operator CLI.
//
//	gmigd serve   [flags]            run the daemon: a pool, vGPUs, vfio-user sockets, control API, migrations
//	gmigd vgpu    create|list|show|rm   manage vGPUs of a running daemon
//	gmigd vm      start|adopt|list|show|stop   manage VMs of a running daemon
//	gmigd migrate VM --to HOST:PORT  live-migrate a VM and its vGPU to another gmigd
//	gmigd guest  [flags]            the built-in guest simulator against a vGPU socket
//	gmigd demo   [flags]            two gmigd and a Linux VM under QEMU: a live migration and its report (-sim: in-process)
//	gmigd bench  [flags]            the migration strategies compared on one seeded workload
//	gmigd certs  -out DIR -hosts a,b  a test CA and certificates for mutual TLS between gmigd
//
// See docs/operator-guide.md.
package main

import (
	"fmt"
	"os"
)

const usage = `usage: gmigd <command> [flags]

commands:
  serve    run the daemon (pool, vGPUs, vfio-user sockets, control API, migrations)
  vgpu     create, list, show or remove vGPUs of a running daemon
  vm       start, adopt, list, show or stop VMs of a running daemon
  migrate  live-migrate a VM and its vGPU to another gmigd
  guest    run the built-in guest simulator against a vGPU's vfio-user socket
  demo     two gmigd and a Linux VM under QEMU: a live migration and its downtime report (-sim: in-process)
  status   this host's GPUs (NVML) and whether the cuda back end can run
  bench    compare the migration strategies on one seeded workload (downtime in ms)
  certs    make a test CA and host certificates for mutual TLS between gmigd (testing only)

Run 'gmigd <command> -h' for a command's flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	cmds := map[string]func([]string) error{
		"serve":   cmdServe,
		"vgpu":    cmdVGPU,
		"vm":      cmdVM,
		"migrate": cmdMigrate,
		"guest":   cmdGuest,
		"demo":    cmdDemo,
		"bench":   cmdBench,
		"status":  cmdStatus,
		"certs":   cmdCerts,
	}
	name, args := os.Args[1], os.Args[2:]
	if name == "-h" || name == "--help" || name == "help" {
		fmt.Print(usage)
		return
	}
	run, ok := cmds[name]
	if !ok {
		fmt.Fprintf(os.Stderr, "gmigd: unknown command %q\n\n%s", name, usage)
		os.Exit(2)
	}
	if err := run(args); err != nil {
		fmt.Fprintf(os.Stderr, "gmigd %s: %v\n", name, err)
		os.Exit(1)
	}
}
