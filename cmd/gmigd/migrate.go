package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/precopy"
)

const migrateUsage = `usage: gmigd migrate VM --to HOST:PORT [flags]

Moves a running VM and its vGPU to the gmigd whose migration listener is
HOST:PORT (gmigd serve -migrate-listen there). Shows progress while it runs
and the downtime report at the end; with --json, the last line's "outcome"
says where the VM is. A VM that is a libvirt domain (gmigd libvirt-hook
made its vGPU) is then settled on this host by --libvirt-source (virsh):
undefined by default, so nothing here starts a second copy.

exit status:
  0  migrated: the VM runs at the destination          (outcome "migrated")
  1  any other error: the daemon refused the migration before it began
     (outcome "not-started", or none) or could not be reached, and
     nothing was done; or this command lost the daemon's answer (gmigd vm
     list shows where the VM is)
  2  bad command line: nothing was done
  3  rolled back: the VM runs on at the source          (outcome "rolled-back")
  4  not resumed: the source could not resume the VM;  (outcome "not-resumed")
     it runs nowhere (gmigd vm list shows it exited)
  5  outcome unknown: the VM stays paused at the source (outcome "unknown")
     until the destination answers, which the daemon goes on asking`

func cmdMigrate(args []string) error {
	fs := newFlagSet("migrate", migrateUsage)
	runDir := hostd.DefaultRunDir
	runDirFlag(fs, &runDir)
	to := fs.String("to", "", "the destination gmigd's migration address, HOST:PORT (required)")
	strategy := fs.String("strategy", string(precopy.OneShot), "vGPU pre-copy strategy: oneshot, iterative or stopcopy")
	bgRate := fs.Int("background-rate", 0, "oneshot: background re-hash budget in pages/s while QEMU pre-copies RAM (0: off)")
	maxBW := fs.Uint64("max-bandwidth-mb", 0, "QEMU's RAM migration bandwidth cap in MiB/s (0: 10 GiB/s)")
	downtime := fs.Duration("downtime-limit", 0, "QEMU's downtime target for its RAM convergence (0: gmigd's 20ms; QEMU's own is 300ms)")
	jsonOut := fs.Bool("json", false, "progress and the report as JSON lines")
	var lv libvirtSource
	lv.register(fs)
	pos, err := parseN(fs, args, "VM")
	if err != nil {
		return err
	}
	switch {
	case *to == "":
		return badUsage(fs, "missing --to HOST:PORT")
	case *bgRate < 0:
		return badUsage(fs, "-background-rate %d: want ≥ 0", *bgRate)
	case *downtime < 0:
		return badUsage(fs, "-downtime-limit %v: want ≥ 0", *downtime)
	}
	if _, err := precopy.ParseStrategy(*strategy); err != nil {
		return badUsage(fs, "%v", err)
	}
	if err := lv.parse(); err != nil {
		return badUsage(fs, "%v", err)
	}
	name := pos[0]
	if err := lv.before(runDir, name); err != nil {
		return err
	}
	// Ctrl-C leaves the migration to the daemon, which resolves it (roll
	// back or commit) whatever happens to this command.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	pp := newProgressPrinter(os.Stdout, *jsonOut, !*jsonOut && term.IsTerminal(int(os.Stdout.Fd())))
	t0 := time.Now()
	rep, err := client(runDir).Migrate(ctx, name, hostd.MigrateRequest{
		To: *to, Strategy: *strategy, BackgroundRate: *bgRate, MaxBandwidthMB: *maxBW, DowntimeMS: downtime.Milliseconds(),
	}, pp.show)
	pp.done()
	var lvMsg string
	if err == nil {
		// The VM runs at the destination whatever becomes of its domain
		// here: a failure is the operator's to finish, not the migration's.
		if lvMsg, err = lv.after(runDir, name, *to); err != nil {
			fmt.Fprintf(os.Stderr, "gmigd migrate: warning: %v\n", err)
			err = nil
		}
	}
	if *jsonOut {
		out := map[string]any{"report": rep}
		if lvMsg != "" {
			out["libvirt"] = lvMsg
		}
		var merr *hostd.MigrationError
		switch {
		case err == nil:
			out["outcome"] = hostd.OutcomeMigrated
		case errors.As(err, &merr):
			out["outcome"] = merr.Outcome
		}
		if err != nil {
			out["error"] = err.Error()
		}
		b, _ := json.Marshal(out)
		fmt.Println(string(b))
		return err
	}
	if err != nil {
		if errors.Is(err, context.Canceled) {
			return fmt.Errorf("interrupted after %s; the daemon finishes or rolls back the migration by itself (gmigd vm list shows where the VM is)", time.Since(t0).Round(time.Millisecond))
		}
		return err
	}
	fmt.Print(rep.String())
	if lvMsg != "" {
		fmt.Println(lvMsg)
	}
	return nil
}
