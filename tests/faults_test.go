package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/internal/cluster"
	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/orchestrator"
)

// The fault cells with real VMs (docs/reliability.md): two gmigd daemons
// over mutual TLS, the source given the address of a faultProxy in front
// of the destination's migration listener, one Linux guest running its
// self-checking workload across the cells that leave it at the source.

// faultCell is one failure of a migration of the guest from a to b.
type faultCell struct {
	name string
	// arm sets the fault up before the migration (px is the proxy);
	// phase, if set, names the progress phase at which at runs.
	arm   func(px *faultProxy)
	phase string
	at    func(px *faultProxy)
	// completes: QEMU's migration completes before the rollback (its
	// switchover runs beside the vGPU's stop phase, on its own
	// connection, which the proxy does not hold): the rollback continues
	// a VM whose outgoing migration completed.
	completes bool
}

// qemuFaultCells leave the VM running at the source.
func qemuFaultCells() []faultCell {
	// The stop phase is the data connection's first bytes after the
	// VMM's pre-copy began (the connections are silent in between: the
	// vGPU's live phase has ended, QEMU's RAM goes on its own
	// connection): the proxy acts on them, before they pass.
	atStop := func(f func(px *faultProxy)) func(px *faultProxy) {
		return func(px *faultProxy) { px.onNextSend(func() { f(px) }) }
	}
	return []faultCell{{
		name:  "network cut during the vGPU stop phase",
		phase: orchestrator.PhaseVMMLive,
		at:    atStop(func(px *faultProxy) { px.cut() }),
	}, {
		name:      "network stalled during the vGPU stop phase (5 s), then dropped",
		phase:     orchestrator.PhaseVMMLive,
		completes: true,
		at: atStop(func(px *faultProxy) {
			px.stall()
			time.AfterFunc(5*time.Second, func() {
				px.cut()
				px.release()
			})
		}),
	}, {
		name: "flipped byte in the vGPU stream (offset 256 KiB of the data connection)",
		arm:  func(px *faultProxy) { px.flip(256 << 10) },
	}}
}

// TestMigrateQEMUFaults runs qemuFaultCells on one guest: each time the
// migration rolls back with a clear error, the VM runs on at the source
// (its workload goes on) and the destination keeps no VM, vGPU or QEMU;
// then the guest migrates through the proxy and its checks and digest
// pass. Last, the source gmigd is killed during QEMU's pre-copy of a
// second guest: its QEMU runs on at the source, the destination discards,
// and the restarted source lists the VM as vgpu-lost.
func TestMigrateQEMUFaults(t *testing.T) {
	e := needEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*e2eTimeout())
	defer cancel()
	const steps, fps = 600, 20
	p := newPair(t, ctx, e)
	p.dumpOnFailure("vm")
	p.dumpOnFailure("vm2")
	a, b := p.d[0], p.d[1]
	px := newFaultProxy(t, b.Addr)
	want := referenceLater(ctx, t, steps)
	conA := p.startVM("vm", e.vmSpec("pc", "intx", steps, fps))
	at := waitStep(ctx, t, conA, 20)

	var rows [][]string
	defer func() {
		if err := migtest.WriteReliability(migtest.Table{
			Title: "Real VMs (tests.TestMigrateQEMUFaults)",
			Note: fmt.Sprintf("One Linux guest under QEMU 11.1 (%s, %d workload steps) between two gmigd over mutual TLS, "+
				"through a TCP proxy in front of the destination's migration listener, as observed on this run.", e.accel, steps),
			Header: []string{"cell", "the VM runs at", "the error the user saw", "the destination's reason (its log)", "cleanup checked", "guest checks and digest"},
			Rows:   rows,
		}); err != nil {
			t.Error(err)
		}
	}()
	for _, c := range qemuFaultCells() {
		if c.arm != nil {
			c.arm(px)
		}
		seen := len(destFailures(b))
		var once sync.Once
		completed := false // QEMU's migration seen completed before the rollback
		_, err := a.Client.Migrate(ctx, "vm", hostd.MigrateRequest{To: px.Addr()}, func(pr orchestrator.Progress) {
			if c.at != nil && pr.Phase == c.phase {
				once.Do(func() { c.at(px) })
			}
			if pr.Phase != orchestrator.PhaseRollback && pr.VMM.Status == "completed" {
				completed = true
			}
		})
		px.reset()
		if err == nil || !strings.Contains(err.Error(), "runs on at the source") {
			t.Fatalf("%s: migration error %v, want a roll-back", c.name, err)
		}
		if c.completes && !completed {
			t.Errorf("%s: QEMU's migration was not seen completed before the rollback", c.name)
		}
		if vms, lerr := a.Client.ListVMs(); lerr != nil || len(vms) != 1 || vms[0].State != "running" {
			t.Fatalf("%s: the source lists %+v (%v)", c.name, vms, lerr)
		}
		at = waitStep(ctx, t, conA, at+5)
		t.Logf("%s: rolled back (%v); the guest goes on at step %d", c.name, err, at)
		cleanup := checkDiscarded(ctx, t, b)
		rows = append(rows, []string{c.name, "source (its workload goes on)", err.Error(), destReason(b, seen), cleanup, ""})
	}
	rep, err := a.Client.Migrate(ctx, "vm", hostd.MigrateRequest{To: px.Addr()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkMigrated(t, rep, a, b, "vm")
	conB := cluster.Follow(b.Console("vm"))
	defer conB.Close()
	got := waitEnd(ctx, t, conB)
	w := <-want
	digest := "guest checks ok; digest " + got[:16] + "… equal to the never-migrated run's (at the workload's end, after the cells)"
	if got != w {
		t.Errorf("digest %s, never migrated %s", got[:16], w[:16])
		digest = "DIGEST DIFFERS: " + got[:16] + " vs " + w[:16]
	}
	for _, r := range rows {
		r[5] = digest // the cells' guest is the one that ended here
	}
	rows = append(rows, []string{"then: the migration through the proxy", "destination",
		"—", "—", "source: no VM, its vGPU destroyed", digest})
	if err := b.Client.StopVM("vm"); err != nil {
		t.Fatal(err)
	}
	rows = append(rows, sourceKilled(ctx, t, p, px))
	rows = append(rows, sourceQEMUExits(ctx, t, p, px))
}

// checkDiscarded waits for the destination to have nothing of a failed
// migration left: no VM, no vGPU, no QEMU process; it says so for the
// table.
func checkDiscarded(ctx context.Context, t *testing.T, b *cluster.Daemon) string {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		vms, verr := b.Client.ListVMs()
		gs, gerr := b.Client.List()
		n := len(qemuPIDs(b))
		if verr == nil && gerr == nil && len(vms) == 0 && len(gs) == 0 && n == 0 {
			return "destination: no VM, no vGPU, no QEMU process"
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			t.Fatalf("the destination keeps VMs %+v (%v), vGPUs %+v (%v), %d QEMU processes", vms, verr, gs, gerr, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// destFailures returns the errors of the destination's failed incoming
// migrations, as its log says them, in order.
func destFailures(d *cluster.Daemon) []string {
	b, _ := os.ReadFile(filepath.Join(d.RunDir, "gmigd.log"))
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		var e struct{ Error, Message string }
		if json.Unmarshal([]byte(l), &e) == nil && strings.HasPrefix(e.Message, "incoming migration failed") {
			out = append(out, e.Error)
		}
	}
	return out
}

// destReason waits for the destination's failure after the first seen
// ones (its log line follows the discard) and returns it.
func destReason(d *cluster.Daemon, seen int) string {
	for end := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if f := destFailures(d); len(f) > seen {
			return f[len(f)-1]
		} else if time.Now().After(end) {
			return "(none logged)"
		}
	}
}

var (
	reAbort   = regexp.MustCompile(`qemu-system-x86_64: .*Assertion .*failed\.`)
	reRecover = regexp.MustCompile(`"vm":"vm2".*"message":"a VM's QEMU (ended with|outlived) the last gmigd`)
)

// migrateStruck starts VM vm at a (its workload long enough to outlast
// the cell), migrates it to b through px once the workload runs, and
// strikes when QEMU's pre-copy begins. It returns how many failures b had
// logged before, for destReason, and the migration's error.
func migrateStruck(ctx context.Context, t *testing.T, p *pair, px *faultProxy, vm string, strike func()) (int, error) {
	t.Helper()
	a, b := p.d[0], p.d[1]
	waitStep(ctx, t, p.startVM(vm, p.e.vmSpec("pc", "intx", 100000, 0)), 10)
	seen := len(destFailures(b))
	var once sync.Once
	_, err := a.Client.Migrate(ctx, vm, hostd.MigrateRequest{To: px.Addr()}, func(pr orchestrator.Progress) {
		if pr.Phase == orchestrator.PhaseVMMLive {
			once.Do(strike)
		}
	})
	return seen, err
}

// sourceKilled is the cell "source gmigd killed during QEMU's pre-copy",
// on a second guest started at a. QEMU 11.1.3's vfio-user client aborts
// when its server goes away while the guest uses the device, so the
// guest's QEMU dies with its gmigd: the client loses its answer, b
// discards its paused copy (no live copy remains: the VM is lost, as in
// a crash of its host), and a restarted a lists the VM as lost until it
// is stopped. A QEMU that survived (a guest not touching its vGPU) would
// be listed vgpu-lost, its migration ended, and stopped the same way.
func sourceKilled(ctx context.Context, t *testing.T, p *pair, px *faultProxy) []string {
	t.Helper()
	a, b := p.d[0], p.d[1]
	const name = "source gmigd killed during QEMU's pre-copy"
	seen, err := migrateStruck(ctx, t, p, px, "vm2", a.Kill)
	if err == nil {
		t.Fatalf("%s: the migration succeeded", name)
	}
	t.Logf("%s: the client saw %v", name, err)
	cleanup := checkDiscarded(ctx, t, b)
	// What became of the source's QEMU: its console says why it ended.
	runs, qemuSaid := "its QEMU runs on without its vGPU", ""
	if countQEMU(t, a) == 0 {
		runs = "nowhere: the source QEMU died with its gmigd, the destination discarded its paused copy"
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		m, _ := cluster.WaitLine(wctx, a.Console("vm2"), reAbort)
		cancel()
		if m != nil {
			qemuSaid = "; the source QEMU's console: " + m[0]
		}
	}
	p.start(ctx, 0)
	a = p.d[0]
	vms, lerr := a.Client.ListVMs()
	wantState := "lost"
	if !strings.HasPrefix(runs, "nowhere") {
		wantState = "vgpu-lost"
	}
	if lerr != nil || len(vms) != 1 || vms[0].Name != "vm2" || vms[0].State != wantState {
		t.Fatalf("%s: the restarted source lists %+v (%v), want vm2 %s", name, vms, lerr, wantState)
	}
	m, werr := cluster.WaitLine(ctx, filepath.Join(a.RunDir, "gmigd.log"), reRecover)
	if werr != nil {
		t.Fatal(werr)
	}
	t.Logf("%s: the restarted source says %s", name, m[0])
	if err := a.Client.StopVM("vm2"); err != nil {
		t.Errorf("%s: stopping the VM: %v", name, err)
	}
	if vms, _ := a.Client.ListVMs(); len(vms) != 0 {
		t.Errorf("%s: the source lists %+v after the stop", name, vms)
	}
	if n := countQEMU(t, a); n != 0 {
		t.Errorf("%s: %d QEMU processes after the stop", name, n)
	}
	return []string{name, runs,
		"the client: " + err.Error() + qemuSaid + "; the restarted source lists the VM as " + wantState,
		destReason(b, seen), cleanup + "; `gmigd vm stop` then forgets it, no QEMU left",
		"not comparable: the vGPU's state died with gmigd"}
}

// sourceQEMUExits is the cell "the source QEMU exits during its
// pre-copy", on a third guest: what a guest that powers itself off in the
// middle of a migration does to its QEMU. The migration fails saying the
// VM could not be resumed (never that it runs on), the destination
// discards, the source lists the VM as exited and refuses to migrate it,
// and `gmigd vm stop` forgets it.
func sourceQEMUExits(ctx context.Context, t *testing.T, p *pair, px *faultProxy) []string {
	t.Helper()
	a, b := p.d[0], p.d[1]
	const name = "source QEMU exits during its pre-copy (as when the guest powers off)"
	seen, err := migrateStruck(ctx, t, p, px, "vm3", func() { killQEMU(t, a) })
	if err == nil || !strings.Contains(err.Error(), "could not be resumed at the source") || strings.Contains(err.Error(), "runs on") {
		t.Fatalf("%s: migration error %v, want one saying the VM could not be resumed", name, err)
	}
	cleanup := checkDiscarded(ctx, t, b)
	vms, lerr := a.Client.ListVMs()
	if lerr != nil || len(vms) != 1 || vms[0].Name != "vm3" || vms[0].State != "exited" {
		t.Fatalf("%s: the source lists %+v (%v), want vm3 exited", name, vms, lerr)
	}
	_, merr := a.Client.Migrate(ctx, "vm3", hostd.MigrateRequest{To: px.Addr()}, nil)
	if merr == nil || !strings.Contains(merr.Error(), "vm3 is exited") {
		t.Errorf("%s: migrating the exited VM: %v, want a refusal", name, merr)
	}
	if err := a.Client.StopVM("vm3"); err != nil {
		t.Errorf("%s: stopping the VM: %v", name, err)
	}
	if vms, _ := a.Client.ListVMs(); len(vms) != 0 {
		t.Errorf("%s: the source lists %+v after the stop", name, vms)
	}
	if gs, _ := a.Client.List(); len(gs) != 0 {
		t.Errorf("%s: the source keeps vGPUs %+v after the stop", name, gs)
	}
	return []string{name, "nowhere: its QEMU ended", "the client: " + err.Error() +
		"; the source lists the VM as exited and refuses to migrate it (" + merr.Error() + ")",
		destReason(b, seen), cleanup + "; `gmigd vm stop` then forgets it and its vGPU",
		"not comparable: the guest ended with its QEMU"}
}
