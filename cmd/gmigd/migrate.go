package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/term"

	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/precopy"
)

const migrateUsage = `usage: gmigd migrate [flags] VM --to HOST:PORT

Moves a running VM and its vGPU to the gmigd whose migration listener is
HOST:PORT (gmigd serve -migrate-listen there). Shows progress while it runs
and the downtime report at the end.`

func cmdMigrate(args []string) error {
	fs := flag.NewFlagSet("migrate", flag.ContinueOnError)
	runDir := fs.String("run-dir", hostd.DefaultRunDir, "the source daemon's run directory (its control socket is gmigd.sock there)")
	to := fs.String("to", "", "the destination gmigd's migration address, HOST:PORT (required)")
	strategy := fs.String("strategy", string(precopy.OneShot), "vGPU pre-copy strategy: oneshot, iterative or stopcopy")
	bgRate := fs.Int("background-rate", 0, "oneshot: background re-hash budget in pages/s while QEMU pre-copies RAM (0: off)")
	maxBW := fs.Uint64("max-bandwidth-mb", 0, "QEMU's RAM migration bandwidth cap in MiB/s (0: 10 GiB/s)")
	downtime := fs.Duration("downtime-limit", 0, "QEMU's downtime target for its RAM convergence (0: QEMU's 300ms)")
	jsonOut := fs.Bool("json", false, "progress and the report as JSON lines")
	streams := streamsFlag(fs, "the vGPU stop phase's streams, at most what the destination takes (0: the source daemon's -streams)")
	fs.Usage = func() { fmt.Fprintln(fs.Output(), migrateUsage); fs.PrintDefaults() }
	// The VM's name may come before or after the flags.
	var name string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		name, args = args[0], args[1:]
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if name == "" && fs.NArg() == 1 {
		name = fs.Arg(0)
	} else if fs.NArg() != 0 || name == "" {
		return fmt.Errorf("want one VM name\n%s", migrateUsage)
	}
	if *to == "" {
		return fmt.Errorf("missing --to HOST:PORT\n%s", migrateUsage)
	}
	if _, err := precopy.ParseStrategy(*strategy); err != nil {
		return err
	}
	if err := checkStreams(*streams); err != nil {
		return err
	}
	c := hostd.NewClient(filepath.Join(*runDir, "gmigd.sock"))
	// Ctrl-C leaves the migration to the daemon, which resolves it (roll
	// back or commit) whatever happens to this command.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	pp := newProgressPrinter(os.Stdout, *jsonOut, !*jsonOut && term.IsTerminal(int(os.Stdout.Fd())))
	t0 := time.Now()
	rep, err := c.Migrate(ctx, name, hostd.MigrateRequest{
		To: *to, Strategy: *strategy, BackgroundRate: *bgRate, MaxBandwidthMB: *maxBW, DowntimeMS: downtime.Milliseconds(),
		Streams: *streams,
	}, pp.show)
	pp.done()
	if *jsonOut {
		out := map[string]any{"report": rep}
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
	return nil
}
