package main

import (
	"fmt"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/internal/bytesize"
)

// The table of migrations from any shell: gmigd migrate-status,
// migrate-cancel and migrate-set-bandwidth (the control API's
// /v1/migrations).

const migrateStatusUsage = `usage: gmigd migrate-status [ID|VM] [--json] [-run-dir DIR]

Lists the daemon's outgoing migrations, those in flight and the last ones
that ended (newest first): phase, bytes sent (vGPU + QEMU RAM), rates,
bandwidth limit, the stop-phase estimate and the outcome. With a migration
ID or a VM's name, describes that one (the VM's migration in flight, else
its latest) with its report.`

func cmdMigrateStatus(args []string) error {
	fs := newFlagSet("migrate-status", migrateStatusUsage)
	runDir := hostd.DefaultRunDir
	runDirFlag(fs, &runDir)
	jsonOut := fs.Bool("json", false, "print JSON")
	pos, afterDash, err := parseArgs(fs, args)
	if err != nil {
		return err
	}
	if pos = append(pos, afterDash...); len(pos) > 1 {
		return badUsage(fs, "want at most one ID or VM, got %q", pos)
	}
	c := client(runDir)
	if len(pos) == 1 {
		j, err := c.Job(pos[0])
		if err != nil {
			return err
		}
		if *jsonOut {
			return printJSON(j)
		}
		fmt.Print(jobText(j))
		return nil
	}
	jobs, err := c.Jobs()
	if err != nil {
		return err
	}
	if *jsonOut {
		return printJSON(jobs)
	}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tVM\tPEER\tPHASE\tELAPSED\tSENT\tRATE\tBANDWIDTH\tESTIMATE\tOUTCOME")
	for _, j := range jobs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%.1fs\t%s\t%s\t%s\t%s\t%s\n", j.ID, j.VM, j.Peer, j.Phase, j.Elapsed.Seconds(),
			mibText(j.Bytes), rate(j.VGPURate+j.RAMRate), limit(j.Bandwidth), estimateMS(j), dash(j.Outcome))
	}
	return tw.Flush()
}

// jobText describes one migration in lines of text.
func jobText(j hostd.Job) string {
	var b strings.Builder
	fmt.Fprintf(&b, "migration %s of VM %s to %s (%s)\n", j.ID, j.VM, j.Peer, j.Strategy)
	state := "in flight"
	if !j.Ended.IsZero() {
		state = "ended " + j.Ended.Format(time.RFC3339) + ", outcome " + j.Outcome
	}
	fmt.Fprintf(&b, "  phase %s, %.1fs, %s\n", j.Phase, j.Elapsed.Seconds(), state)
	fmt.Fprintf(&b, "  sent %s (vGPU %s at %s, QEMU RAM %s at %s); bandwidth limit %s\n",
		mibText(j.Bytes), mibText(j.VGPUBytes), rate(j.VGPURate), mibText(j.RAMBytes), rate(j.RAMRate), limit(j.Bandwidth))
	if j.MaxDowntime > 0 {
		fmt.Fprintf(&b, "  max downtime %d ms\n", j.MaxDowntime.Milliseconds())
	}
	if j.Estimate != nil {
		fmt.Fprintf(&b, "  %s\n", j.Estimate)
	}
	if j.Error != "" {
		fmt.Fprintf(&b, "  error: %s\n", j.Error)
	}
	if j.Report != nil && j.Outcome == hostd.OutcomeMigrated {
		b.WriteString(j.Report.String())
	}
	return b.String()
}

func mibText(n uint64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

func rate(r float64) string { return fmt.Sprintf("%.1f MiB/s", r/(1<<20)) }

func limit(bps uint64) string {
	if bps == 0 {
		return "none"
	}
	return rate(float64(bps))
}

func estimateMS(j hostd.Job) string {
	if j.Estimate == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f ms", float64(j.Estimate.Total)/float64(time.Millisecond))
}

const migrateCancelUsage = `usage: gmigd migrate-cancel ID|VM [--reason TEXT] [-run-dir DIR]

Cancels a migration in flight (by its ID, or its VM's name) before its
commit: it rolls back, the destination discards what it built, and the VM
runs on here. gmigd migrate-status shows when the rollback is done. After
the commit point the daemon refuses (409 "committed"): the migration then
ends at the destination.`

func cmdMigrateCancel(args []string) error {
	fs := newFlagSet("migrate-cancel", migrateCancelUsage)
	runDir := hostd.DefaultRunDir
	runDirFlag(fs, &runDir)
	reason := fs.String("reason", "cancelled by the operator", "why, for the migration's error and the logs")
	pos, err := parseN(fs, args, "ID|VM")
	if err != nil {
		return err
	}
	j, err := client(runDir).CancelJob(pos[0], *reason)
	if err != nil {
		return err
	}
	fmt.Printf("migration %s of VM %s cancelled in phase %s: it rolls back and the VM runs on here\n", j.ID, j.VM, j.Phase)
	return nil
}

const migrateSetBandwidthUsage = `usage: gmigd migrate-set-bandwidth ID|VM RATE [-run-dir DIR]

Changes the bandwidth limit of a migration in flight (by its ID, or its
VM's name), at once: RATE bytes/s for the vGPU stream and QEMU's RAM
together, as 64M, 1G or 1GiB (per second; "/s" may follow), 0 for none.`

func cmdMigrateSetBandwidth(args []string) error {
	fs := newFlagSet("migrate-set-bandwidth", migrateSetBandwidthUsage)
	runDir := hostd.DefaultRunDir
	runDirFlag(fs, &runDir)
	pos, err := parseN(fs, args, "ID|VM", "RATE")
	if err != nil {
		return err
	}
	bps, err := parseRate(pos[1])
	if err != nil {
		return badUsage(fs, "RATE %q: %v", pos[1], err)
	}
	j, err := client(runDir).SetJobBandwidth(pos[0], bps)
	if err != nil {
		return err
	}
	fmt.Printf("migration %s of VM %s: bandwidth limit %s\n", j.ID, j.VM, limit(j.Bandwidth))
	return nil
}

// parseRate reads a rate in bytes/s: a size (bytesize) with an optional
// "/s".
func parseRate(s string) (uint64, error) {
	return bytesize.Parse(strings.TrimSuffix(strings.TrimSpace(s), "/s"))
}

// rateFlag is a flag.Value for a rate in bytes/s (parseRate).
type rateFlag uint64

func (r *rateFlag) String() string { return fmt.Sprint(uint64(*r)) }

func (r *rateFlag) Set(s string) error {
	v, err := parseRate(s)
	*r = rateFlag(v)
	return err
}
