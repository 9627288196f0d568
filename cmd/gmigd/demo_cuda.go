package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"time"

	"golang.org/x/term"

	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/hostd/qemu"
	"github.com/gmig-dev/gmig/internal/cluster"
)

// `gmigd demo -cuda-program PROG[,ARG...]`: the guest runs a CUDA program
// on its libcuda.so.1 (cmd/gmig-guest's gmig.cuda mode) instead of the
// suite and workload. VM "demo" on A is live-migrated to B once the program
// has printed -program-lines lines; VM "ref" on B runs the same program on
// the same vGPU configuration and never moves. The program's lines from
// both, "time:" lines aside, must be the same.

// Console lines of gmig-guest's CUDA mode (cmd/gmig-guest/cuda.go): each
// line the program writes is relayed with the "gmig: " prefix between
// these two.
var (
	reProgramLine = regexp.MustCompile(`^gmig: .*`)
	reProgramExit = regexp.MustCompile(`gmig: cuda exit (-?\d+)`)
)

const (
	programStart  = "gmig: cuda: running "
	programPrefix = "gmig: "
	// timeLinePrefix marks a program's timing lines, which differ from
	// run to run and are left out of the comparison (the evidence
	// programs' convention, docs/cuda.md).
	timeLinePrefix = "time:"
	// libraryLogPrefix begins the guest libcuda.so.1's log lines (JSON,
	// time-stamped, on the program's standard error; docs/cuda.md): not
	// the program's output, left out of the comparison.
	libraryLogPrefix = `{"level":`
	libraryLogMark   = `"lib":"libcuda"`
)

// errProgramEnded: the guest's program ended before the migration could
// start.
var errProgramEnded = errors.New("the program ended before the migration")

// programTimeout bounds the boot, the program and the migration.
const programTimeout = 10 * time.Minute

func (q *qemuDemo) runProgram(ctx context.Context, c demoCluster) error {
	a, b := c.a, c.b
	spec := qemu.Spec{
		Machine: q.machine, MemoryMB: q.ramMB, CPUs: q.cpus, Accel: c.accel, Kernel: c.kernel, Initrd: c.initrd,
		Append: "console=ttyS0 panic=-1 quiet gmig.cuda=" + q.program,
	}
	if _, err := b.Client.StartVM(q.vmRequest("ref", spec)); err != nil {
		return err
	}
	vm, err := a.Client.StartVM(q.vmRequest("demo", spec))
	if err != nil {
		return err
	}
	fmt.Printf("VM %q on A (QEMU pid %d) and VM \"ref\" on B, each with a %s vGPU of %d MiB graphics memory and %d MiB local memory%s, run %s\n",
		vm.Name, vm.PID, q.backend, q.mem>>20, q.localMem>>20, modulesNote(q.guestModules), q.program)
	runCtx, cancel := context.WithTimeout(ctx, programTimeout)
	defer cancel()
	con := cluster.Follow(a.Console("demo"))
	defer con.Close()
	if _, err := con.Wait(runCtx, regexp.MustCompile(regexp.QuoteMeta(programStart))); err != nil {
		return err
	}
	for n := 0; n < q.programLines; n++ {
		m, err := con.Wait(runCtx, reProgramLine)
		if err != nil {
			return err
		}
		if reProgramExit.MatchString(m[0]) {
			return fmt.Errorf("%w, after %d lines (-program-lines %d): %s", errProgramEnded, n, q.programLines, m[0])
		}
	}
	fmt.Printf("guest: the program printed %d lines; gmigd migrate demo --to %s (%s%s)\n", q.programLines, b.Addr, q.strategy, trackingNote(q.noTracking))
	pp := newProgressPrinter(os.Stdout, q.json, term.IsTerminal(int(os.Stdout.Fd())))
	rep, err := a.Client.Migrate(runCtx, "demo", hostd.MigrateRequest{To: b.Addr, Strategy: string(q.strategy), NoTracking: q.noTracking}, pp.show)
	pp.done()
	if err != nil {
		return err
	}
	arrived, err := b.Client.Get("demo")
	if err != nil {
		return err
	}
	fmt.Printf("the VM runs on B: its vGPU there has the %s back end, %d MiB graphics memory and %d MiB local memory\n",
		arrived.Backend, arrived.MemSize>>20, arrived.LocalMemSize>>20)
	fmt.Println()
	fmt.Print(indent(rep.String(), "  "))
	fmt.Println()
	for _, w := range []struct {
		d  *cluster.Daemon
		vm string
	}{{b, "demo"}, {b, "ref"}} {
		if _, err := cluster.WaitLine(runCtx, w.d.Console(w.vm), reResult); err != nil {
			return err
		}
	}
	var logs [3][]byte
	for i, p := range []string{a.Console("demo"), b.Console("demo"), b.Console("ref")} {
		if logs[i], err = os.ReadFile(p); err != nil {
			return fmt.Errorf("console: %w", err)
		}
	}
	moved, movedExit := programOutput(logs[0], logs[1])
	ref, refExit := programOutput(logs[2])
	fmt.Printf("program output, migrated run (A then B), exit %s:\n", movedExit)
	for _, l := range moved {
		fmt.Printf("  | %s\n", l)
	}
	fmt.Printf("never-migrated run: exit %s\n", refExit)
	diff := compareOutputs(moved, ref)
	fmt.Printf("program output after the migration vs never migrated (%s lines and the library's log left out): %s\n", timeLinePrefix, diff)
	switch {
	case len(moved) == 0:
		return errors.New("the program printed nothing")
	case movedExit != "0" || refExit != "0":
		return fmt.Errorf("the program exited %s (migrated) and %s (never migrated)", movedExit, refExit)
	case diff != "identical":
		return errors.New("the migrated program's output differs from the never-migrated run's")
	}
	return nil
}

func modulesNote(on bool) string {
	if on {
		return ", guest modules"
	}
	return ""
}

func trackingNote(off bool) string {
	if off {
		return ", no write tracking"
	}
	return ""
}

// programOutput returns the lines a CUDA program printed in a guest and its
// exit status ("?" when the console ends before it), from the console logs
// of the hosts the VM ran on, in order (joined by cluster.JoinConsoles):
// the program's lines are those relayed between "gmig: cuda: running" and
// "gmig: cuda exit N", without the prefix.
func programOutput(logs ...[]byte) (lines []string, exit string) {
	exit = "?"
	in := false
	for _, line := range cluster.JoinConsoles(logs...) {
		switch {
		case !in:
			in = strings.HasPrefix(line, programStart)
		case reProgramExit.MatchString(line):
			return lines, reProgramExit.FindStringSubmatch(line)[1]
		case strings.HasPrefix(line, programPrefix):
			lines = append(lines, strings.TrimPrefix(line, programPrefix))
		}
	}
	return lines, exit
}

// compareOutputs says "identical" when got and want are the same lines
// once the "time:" lines and the library's log lines are left out, else
// where they first differ.
func compareOutputs(got, want []string) string {
	got, want = compared(got), compared(want)
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] {
			return fmt.Sprintf("DIFFERENT from line %d: %q vs %q", i+1, got[i], want[i])
		}
	}
	if len(got) != len(want) {
		return fmt.Sprintf("DIFFERENT: %d lines vs %d", len(got), len(want))
	}
	return "identical"
}

func compared(lines []string) []string {
	var out []string
	for _, l := range lines {
		libLog := strings.HasPrefix(l, libraryLogPrefix) && strings.Contains(l, libraryLogMark)
		if !libLog && !strings.HasPrefix(l, timeLinePrefix) {
			out = append(out, l)
		}
	}
	return out
}
