package main

import (
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/sim"
)

// guestRun is what the built-in guest simulator does on one vGPU.
type guestRun struct {
	socket string
	suite  bool
	steps  int
	seed   int64
	irq    string // "poll", "intx" or "msi"
	check  bool
}

func (g *guestRun) flags(fs *flag.FlagSet, defaultSteps int) {
	fs.BoolVar(&g.suite, "suite", true, "run the correctness suite")
	fs.IntVar(&g.steps, "steps", defaultSteps, "seeded workload steps to run after the suite (0: none)")
	fs.Int64Var(&g.seed, "seed", 1, "workload seed (also seeds the GTT permutation)")
	fs.StringVar(&g.irq, "irq", "intx", "how to wait for fences: poll, intx or msi")
	fs.BoolVar(&g.check, "check", true, "verify graphics memory against a CPU reference model after every workload step")
}

const guestUsage = `usage: gmigd guest -socket SOCK [flags]

Attaches to a vGPU's vfio-user socket as QEMU and a guest driver would, then
runs the correctness suite and a seeded workload (printing its digest).`

func cmdGuest(args []string) error {
	var g guestRun
	fs := newFlagSet("guest", guestUsage)
	fs.StringVar(&g.socket, "socket", "", "the vGPU's vfio-user socket (required)")
	g.flags(fs, 0)
	if _, err := parseN(fs, args); err != nil {
		return err
	}
	if g.socket == "" {
		return badUsage(fs, "-socket is required")
	}
	if g.steps < 0 {
		return badUsage(fs, "-steps %d: want ≥ 0", g.steps)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	return g.run(ctx, os.Stdout)
}

// run attaches to the vGPU like QEMU plus a guest driver would, then runs
// the suite and the workload, reporting to out.
func (g *guestRun) run(ctx context.Context, out io.Writer) error {
	opts := sim.Options{NoIRQ: g.irq == "poll", MSI: g.irq == "msi"}
	if g.irq != "poll" && g.irq != "intx" && g.irq != "msi" {
		return fmt.Errorf("-irq %q: want poll, intx or msi", g.irq)
	}
	bus, err := sim.Attach(g.socket, opts)
	if err != nil {
		return err
	}
	defer bus.Close()
	d, err := guest.Open(bus, guest.Options{Seed: g.seed, UseIRQ: g.irq != "poll"})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "attached to %s: %d MiB graphics memory, %d GTT entries, fences by %s\n",
		g.socket, d.MemSize()>>20, d.GTTEntries(), g.irq)
	var failed error
	if g.suite {
		r := guest.Suite(ctx, d)
		fmt.Fprintf(out, "\ncorrectness suite:\n%s", r)
		if !r.OK() {
			failed = fmt.Errorf("%d suite checks failed", len(r.Failed()))
		}
	}
	if g.steps > 0 {
		if err := g.workload(ctx, d, out); err != nil {
			return err
		}
	}
	return failed
}

func (g *guestRun) workload(ctx context.Context, d *guest.Driver, out io.Writer) error {
	w, err := guest.NewWorkload(g.seed, guest.WorkloadConfig{Check: g.check})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "\nworkload: seed %d, %d steps, reference check %v\n", g.seed, g.steps, g.check)
	t0 := time.Now()
	every := max(1, g.steps/10)
	for i := 1; i <= g.steps; i++ {
		if err := w.Step(ctx, d); err != nil {
			return fmt.Errorf("workload step %d: %w", i, err)
		}
		if i%every == 0 || i == g.steps {
			fmt.Fprintf(out, "  step %d/%d  %s\n", i, g.steps, time.Since(t0).Round(time.Millisecond))
		}
	}
	sum, err := w.Digest(d)
	if err != nil {
		return err
	}
	counts := w.OpCounts()
	kinds := make([]guest.OpKind, 0, len(counts))
	for k := range counts {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i] < kinds[j] })
	fmt.Fprint(out, "  operations:")
	for _, k := range kinds {
		fmt.Fprintf(out, " %s=%d", k, counts[k])
	}
	fmt.Fprintf(out, "\n  digest %s in %s\n", hex.EncodeToString(sum[:]), time.Since(t0).Round(time.Millisecond))
	return nil
}
