package hostd

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/orchestrator"
)

// TestAPIMigrationJobs: a migration in flight is listed and described
// (by ID and by VM name) with its phase and bandwidth; its bandwidth
// changes mid-flight; a cancel rolls it back (the VM runs on at the
// source, nothing stays at the destination) and the table keeps it with
// its outcome; a second cancel, an unknown ID, are refused.
func TestAPIMigrationJobs(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sims := &sim.Registry{}
	src := newMigHost(t, ctx, sims, false)
	dst := newMigHost(t, ctx, sims, true)
	startSimVM(t, ctx, src, sims, 4<<20)
	c := NewClient(serveTestAPI(t, src.Host, defaultAPITimeouts))

	// 1 MB/s: the 4 MiB vGPU's live phase takes seconds, in which the
	// test acts.
	live := make(chan string, 1)
	type result struct {
		rep orchestrator.Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := c.Migrate(ctx, "vm", MigrateRequest{To: dst.addr, Bandwidth: 1e6}, func(p orchestrator.Progress) {
			if p.Phase == orchestrator.PhaseVGPULive {
				select {
				case live <- p.ID:
				default:
				}
			}
		})
		done <- result{rep, err}
	}()
	var id string
	select {
	case id = <-live:
	case <-ctx.Done():
		t.Fatal("the migration's live phase never came")
	}
	jobs, err := c.Jobs()
	if err != nil || len(jobs) != 1 || jobs[0].ID != id || jobs[0].VM != "vm" || jobs[0].Peer != dst.addr ||
		!jobs[0].Ended.IsZero() || jobs[0].Bandwidth != 1e6 || jobs[0].Strategy != "oneshot" {
		t.Fatalf("listed %+v (%v)", jobs, err)
	}
	byVM, err := c.Job("vm")
	if err != nil || byVM.ID != id {
		t.Fatalf("by VM name: %+v (%v)", byVM, err)
	}
	if j, err := c.SetJobBandwidth(id, 2e6); err != nil || j.Bandwidth != 2e6 {
		t.Fatalf("set bandwidth: %+v (%v)", j, err)
	}
	if j, err := c.Job(id); err != nil || j.Bandwidth != 2e6 {
		t.Fatalf("after set bandwidth: %+v (%v)", j, err)
	}
	if _, err := c.CancelJob("vm", "test says stop"); err != nil {
		t.Fatalf("cancel: %v", err)
	}
	r := <-done
	if !errors.Is(r.err, orchestrator.ErrRolledBack) || !strings.Contains(r.err.Error(), "test says stop") {
		t.Fatalf("Migrate after the cancel: %v", r.err)
	}
	if vi, err := src.GetVM("vm"); err != nil || vi.State != vmRunning {
		t.Errorf("after the cancel the VM is %+v (%v)", vi, err)
	}
	// The destination discards what it built when it hears the rollback.
	select {
	case a := <-dst.arrivals:
		if a.Err == nil {
			t.Error("the destination says the VM arrived")
		}
	case <-ctx.Done():
		t.Fatal("no end at the destination")
	}
	for _, v := range dst.List() {
		if v.Name != "filler" {
			t.Errorf("the destination kept vGPU %+v", v)
		}
	}
	j, err := c.Job(id)
	if err != nil || j.Outcome != OutcomeRolledBack || j.Ended.IsZero() || j.Phase != orchestrator.PhaseRollback ||
		!strings.Contains(j.Error, "cancelled") || j.Report == nil || j.Report.ID != id {
		t.Errorf("after the rollback: %+v (%v)", j, err)
	}
	if _, err := c.CancelJob(id, ""); err == nil || !strings.Contains(err.Error(), "409") {
		t.Errorf("a second cancel: %v, want 409", err)
	}
	if _, err := c.Job("nosuch"); err == nil || !strings.Contains(err.Error(), "404") {
		t.Errorf("an unknown migration: %v, want 404", err)
	}
}

// TestAPICancelCommittedIs409: a cancel past the commit point answers 409
// and says "committed".
func TestAPICancelCommittedIs409(t *testing.T) {
	rec := httptest.NewRecorder()
	writeJobError(rec, fmt.Errorf("hostd: cancelling migration x: %w", orchestrator.ErrCommitted))
	if rec.Code != http.StatusConflict || !strings.Contains(rec.Body.String(), "committed") {
		t.Errorf("%d %s", rec.Code, rec.Body)
	}
}

// TestAPIMigrateDryRun: a dry run against a destination with room passes
// and one without fails naming the pool; neither moves anything.
func TestAPIMigrateDryRun(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sims := &sim.Registry{}
	src := newMigHost(t, ctx, sims, false)
	roomy := newMigHost(t, ctx, sims, false)
	full := newMigHostWith(t, ctx, true, Config{Sims: sims, PoolSize: 6 << 20}) // 4 MiB filler: 2 MiB left
	startSimVM(t, ctx, src, sims, 4<<20)
	c := NewClient(serveTestAPI(t, src.Host, defaultAPITimeouts))

	check, err := c.CheckMigration(ctx, "vm", MigrateRequest{To: roomy.addr})
	if err != nil || !check.OK || check.Estimate.Link <= 0 {
		t.Fatalf("dry run to a host with room: %+v (%v)", check, err)
	}
	t.Log(check)
	for _, want := range []string{"name", "pool", "back end", "vm"} {
		if !strings.Contains(check.String(), "ok   "+want) {
			t.Errorf("the check does not pass %q:\n%s", want, check)
		}
	}
	check, err = c.CheckMigration(ctx, "vm", MigrateRequest{To: full.addr})
	var merr *MigrationError
	if !errors.As(err, &merr) || merr.Outcome != OutcomeNotStarted || check.OK ||
		!strings.Contains(check.String(), "FAIL pool") {
		t.Fatalf("dry run to a full host: %v\n%s", err, check)
	}
	for _, h := range []*migHost{roomy, full} {
		for _, v := range h.List() {
			if v.Name != "filler" {
				t.Errorf("a dry run left vGPU %s at a destination", v.Name)
			}
		}
	}
	if vi, err := src.GetVM("vm"); err != nil || vi.State != vmRunning {
		t.Errorf("after the dry runs the VM is %+v (%v)", vi, err)
	}
	if jobs := src.Jobs(); len(jobs) != 0 {
		t.Errorf("dry runs in the table of migrations: %+v", jobs)
	}
}
