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
says where the VM is. From any shell, gmigd migrate-status shows it,
migrate-cancel cancels it before its commit and migrate-set-bandwidth
changes its --bandwidth.

--max-downtime D bounds pause → resume: before QEMU may pause the VM,
gmigd estimates the stop phase from the vGPU's dirty rate and the measured
link and pre-copies more (up to 8 extra rounds), or rolls back with the
estimate rather than exceed D. --dry-run asks the destination whether the
migration would land (the name free, room in its pool, the back end, its
QEMU and the VM's machine type) and prints that and the estimate; nothing
moves (exit 0: it would land; 1: it would not).

After a migration, a VM that is a libvirt domain (gmigd libvirt-hook made
its vGPU) is settled on this host by --libvirt-source (virsh): undefined
by default, so nothing here starts a second copy.

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
	var bandwidth rateFlag
	fs.Var(&bandwidth, "bandwidth", "limit on the vGPU stream and QEMU's RAM together, bytes/s as 64M or 1G (0: none; migrate-set-bandwidth changes it)")
	maxDowntime := fs.Duration("max-downtime", 0, "bound on the estimated pause → resume: pre-copy more, or roll back, rather than exceed it (0: none)")
	dryRun := fs.Bool("dry-run", false, "check the destination and print the estimate; move nothing")
	jsonOut := fs.Bool("json", false, "progress and the report as JSON lines")
	streams := streamsFlag(fs, "the vGPU stop phase's streams, at most what the destination takes (0: the source daemon's -streams)")
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
	case *maxDowntime < 0:
		return badUsage(fs, "-max-downtime %v: want ≥ 0", *maxDowntime)
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
	if err := checkStreams(*streams); err != nil {
		return badUsage(fs, "%v", err)
	}
	// Ctrl-C leaves the migration to the daemon, which resolves it (roll
	// back or commit) whatever happens to this command.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	req := hostd.MigrateRequest{
		To: *to, Strategy: *strategy, BackgroundRate: *bgRate, MaxBandwidthMB: *maxBW, DowntimeMS: downtime.Milliseconds(),
		Bandwidth: uint64(bandwidth), MaxDowntimeMS: maxDowntime.Milliseconds(), Streams: *streams,
	}
	if *dryRun {
		return dryRunMigrate(ctx, runDir, name, req, *jsonOut)
	}
	pp := newProgressPrinter(os.Stdout, *jsonOut, !*jsonOut && term.IsTerminal(int(os.Stdout.Fd())))
	t0 := time.Now()
	rep, err := client(runDir).Migrate(ctx, name, req, pp.show)
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
			return fmt.Errorf("interrupted after %s; the daemon finishes or rolls back the migration by itself (gmigd migrate-status %s shows it, gmigd migrate-cancel %s cancels it)", time.Since(t0).Round(time.Millisecond), name, name)
		}
		return err
	}
	fmt.Print(rep.String())
	if lvMsg != "" {
		fmt.Println(lvMsg)
	}
	return nil
}

// dryRunMigrate runs gmigd migrate --dry-run: the destination's checks and
// the estimate, printed; nothing moves.
func dryRunMigrate(ctx context.Context, runDir, name string, req hostd.MigrateRequest, jsonOut bool) error {
	check, err := client(runDir).CheckMigration(ctx, name, req)
	if jsonOut {
		out := map[string]any{"check": check, "outcome": hostd.OutcomeNotStarted}
		if err != nil {
			out["error"] = err.Error()
		}
		b, _ := json.Marshal(out)
		fmt.Println(string(b))
		return err
	}
	if len(check.Items) > 0 {
		fmt.Print(check.String())
	}
	return err
}
