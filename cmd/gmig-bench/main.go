// Command gmig-bench measures a vGPU's migration downtime in ms: every
// pre-copy strategy on workload profiles, vGPU sizes and dirty rates,
// between two gmigd hosts in this process with the built-in guest
// simulator (internal/inproc), and with -qemu between two gmigd daemons
// moving a Linux VM under QEMU; beside each result, the physical limit of
// the machine it ran on. It writes tables, results.json, results.md and
// plots (docs/benchmarks.md).
//
//	gmig-bench [flags]
//
// It is its own command so that gmigd does not link the plotting
// libraries (gonum/plot, its fonts and LaTeX renderer).
package main

import (
	"fmt"
	"os"

	"github.com/gmig-dev/gmig/internal/keepmem"
)

func main() {
	keepmem.Ensure() // as gmigd serve does: measure what the daemon does
	if err := cmdBench(os.Args[1:]); err != nil {
		fmt.Fprintf(os.Stderr, "gmig-bench: %v\n", err)
		os.Exit(1)
	}
}
