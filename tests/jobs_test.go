package tests

import (
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/orchestrator"
)

// TestMigrateQEMUCancel: a migration of a Linux VM under a bandwidth limit
// holds QEMU's RAM stream to it, and `gmigd migrate-cancel` while QEMU
// pre-copies RAM rolls it back: QEMU's migration is cancelled, the guest
// goes on at the source, the destination keeps nothing, and
// `gmigd migrate-status` says rolled-back.
func TestMigrateQEMUCancel(t *testing.T) {
	e := needEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*e2eTimeout())
	defer cancel()
	const steps, fps = 800, 20
	const limit = 8 << 20 // bytes/s: QEMU's RAM pre-copy takes seconds under it
	p := newPair(t, ctx, e)
	p.dumpOnFailure("vm")
	a, b := p.d[0], p.d[1]
	conA := p.startVM("vm", e.vmSpec("pc", "intx", steps, fps))
	at := waitStep(ctx, t, conA, 20)

	// The RAM stream's rate over two seconds of QEMU's pre-copy, then the
	// cancel, from another shell.
	var (
		once      sync.Once
		first     *orchestrator.Progress
		ramRate   float64
		cancelOut []byte
		cancelErr error
	)
	cancelled := make(chan struct{})
	_, err := a.Client.Migrate(ctx, "vm", hostd.MigrateRequest{To: b.Addr, Bandwidth: limit}, func(pr orchestrator.Progress) {
		if pr.Phase != orchestrator.PhaseVMMLive {
			return
		}
		if first == nil {
			first = &pr
			return
		}
		if pr.Elapsed-first.Elapsed < 2*time.Second {
			return
		}
		once.Do(func() {
			ramRate = float64(pr.VMM.Transferred-first.VMM.Transferred) / (pr.Elapsed - first.Elapsed).Seconds()
			cancelOut, cancelErr = exec.CommandContext(ctx, p.bin, "migrate-cancel", "vm", "-run-dir", a.RunDir).CombinedOutput()
			close(cancelled)
		})
	})
	select {
	case <-cancelled:
	default:
		t.Fatalf("the migration ended before the cancel: %v", err)
	}
	t.Logf("QEMU's RAM at %.1f MiB/s under a %d MiB/s limit; gmigd migrate-cancel: %s", ramRate/(1<<20), limit>>20, cancelOut)
	if cancelErr != nil || !strings.Contains(string(cancelOut), "cancelled in phase vmm-precopy") {
		t.Fatalf("gmigd migrate-cancel: %v\n%s", cancelErr, cancelOut)
	}
	if ramRate > 1.5*limit {
		t.Errorf("QEMU's RAM stream ran at %.1f MiB/s, over the %d MiB/s limit", ramRate/(1<<20), limit>>20)
	}
	if !errors.Is(err, orchestrator.ErrRolledBack) || !strings.Contains(err.Error(), "migration cancelled") {
		t.Fatalf("the migration: %v, want a roll-back for the cancel", err)
	}
	if vms, lerr := a.Client.ListVMs(); lerr != nil || len(vms) != 1 || vms[0].State != "running" {
		t.Fatalf("the source lists %+v (%v)", vms, lerr)
	}
	at = waitStep(ctx, t, conA, at+10) // the guest goes on at the source
	if vms, _ := b.Client.ListVMs(); len(vms) != 0 {
		t.Errorf("the destination kept VMs %+v", vms)
	}
	if gs, _ := b.Client.List(); len(gs) != 0 {
		t.Errorf("the destination kept vGPUs %+v", gs)
	}
	out, serr := exec.CommandContext(ctx, p.bin, "migrate-status", "vm", "--json", "-run-dir", a.RunDir).Output()
	var j hostd.Job
	if serr != nil || json.Unmarshal(out, &j) != nil || j.Outcome != hostd.OutcomeRolledBack || j.Bandwidth != limit {
		t.Errorf("gmigd migrate-status vm --json: %v\n%s", serr, out)
	}
	t.Logf("rolled back (%v); the guest goes on at step %d", err, at)
}
