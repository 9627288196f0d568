package tests

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/hostd/qemu"
	"github.com/gmig-dev/gmig/internal/cluster"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/vgpu"
)

// The guest program's console lines these tests follow (cmd/gmig-guest).
var (
	reStep   = regexp.MustCompile(`gmig: workload step (\d+)\b`)
	reResult = regexp.MustCompile(`gmig: result (ok|FAIL)`)
	reEnd    = regexp.MustCompile(`gmig: workload(?: seed=\d+ steps=\d+ in \S+ digest=([0-9a-f]{64})|: (.*))`)
)

const (
	e2eSeed    = 5
	e2eVGPUMem = 16 << 20
)

// gmigdBinary builds cmd/gmigd once for the tests that run it as daemons.
var gmigdBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "gmig-e2e-bin-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "gmigd")
	out, err := exec.Command("go", "build", "-o", bin, "github.com/gmig-dev/gmig/cmd/gmigd").CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building gmigd: %v\n%s", err, out)
	}
	return bin, nil
})

// pair is two gmigd daemons on this machine.
type pair struct {
	t        *testing.T
	e        env
	dir      string
	bin      string
	insecure bool // -insecure-migrations instead of mutual TLS
	// extra, if set, gives daemon i's own serve flags (its GPU).
	extra func(i int) []string
	d     [2]*cluster.Daemon
}

func newPair(t *testing.T, ctx context.Context, e env) *pair { return newPairTLS(t, ctx, e, true) }

// newPairTLS starts two daemons with mutual TLS between them, or without
// (-insecure-migrations, plain TCP).
func newPairTLS(t *testing.T, ctx context.Context, e env, withTLS bool) *pair {
	t.Helper()
	return newPairWith(t, ctx, e, withTLS, nil)
}

// newPairWith starts two daemons as newPairTLS does, daemon i with the
// serve flags extra(i) besides (extra may be nil).
func newPairWith(t *testing.T, ctx context.Context, e env, withTLS bool, extra func(i int) []string) *pair {
	t.Helper()
	bin, err := gmigdBinary()
	if err != nil {
		t.Fatal(err)
	}
	p := &pair{t: t, e: e, dir: t.TempDir(), bin: bin, insecure: !withTLS, extra: extra}
	for i := range p.d {
		p.start(ctx, i)
	}
	t.Cleanup(func() {
		for _, d := range p.d {
			if d != nil {
				d.Stop(10 * time.Second)
			}
		}
		// QEMUs outlive a killed daemon; end any left under this test.
		_ = exec.Command("pkill", "-KILL", "-f", "qemu-system.*"+regexp.QuoteMeta(p.dir)).Run()
	})
	return p
}

// start (re)starts daemon i in its run directory.
func (p *pair) start(ctx context.Context, i int) {
	p.t.Helper()
	name := string(rune('a' + i))
	var extra []string
	if p.extra != nil {
		extra = p.extra(i)
	}
	d, err := cluster.Start(ctx, p.dir, name, cluster.Options{Binary: p.bin, QEMURoot: string(p.e.root), Pool: "128M", LogLevel: "info",
		Insecure: p.insecure, Extra: extra})
	if err != nil {
		p.t.Fatal(err)
	}
	p.d[i] = d
}

// dumpOnFailure logs the daemons' logs and the VM's consoles if the test
// failed.
func (p *pair) dumpOnFailure(vm string) {
	p.t.Cleanup(func() {
		if !p.t.Failed() {
			return
		}
		for _, d := range p.d {
			if d == nil {
				continue
			}
			p.t.Logf("gmigd %s log:\n%s", d.Name, d.LogTail(40))
			if b, err := os.ReadFile(d.Console(vm)); err == nil {
				p.t.Logf("gmigd %s console of %s:\n%s", d.Name, vm, tail(string(b), 40))
			}
		}
	})
}

// startVM starts VM name at daemon a with spec and follows its console
// (closed at the end of the test).
func (p *pair) startVM(name string, spec qemu.Spec) *cluster.Console {
	p.t.Helper()
	if _, err := p.d[0].Client.StartVM(hostd.StartVMRequest{Name: name, MemSize: e2eVGPUMem, QEMU: spec}); err != nil {
		p.t.Fatal(err)
	}
	con := cluster.Follow(p.d[0].Console(name))
	p.t.Cleanup(func() { con.Close() })
	return con
}

func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// vmSpec is the guest: the self-checking seeded workload with a 1 ms
// heartbeat and a progress line every 10 steps.
// irq is the guest's interrupt mode: intx (its default, through
// uio_pci_generic) or msi. fps > 0 paces the workload to at most that
// many steps a second of guest time (the digest is the same): a test that
// migrates in the middle of the workload sets a floor on how long it
// lasts, which an unpaced guest under KVM runs through about thirty
// times faster than under TCG, faster than a migration completes.
func (e env) vmSpec(machine, irq string, steps, fps int) qemu.Spec {
	mode, extra := "", []string(nil)
	if irq != "intx" {
		mode = " gmig.irq=" + irq
	}
	if fps > 0 {
		mode += fmt.Sprintf(" gmig.workload=mixed,fps=%d", fps)
	}
	if irq == "msi" {
		extra = MSIExtra // MSI in this guest needs a virtual IOMMU
	}
	return e.guestSpec(machine, fmt.Sprintf("gmig.measure=0 gmig.suite=false gmig.steps=%d gmig.seed=%d gmig.check=true gmig.progress=10%s",
		steps, e2eSeed, mode), extra)
}

// waitStep follows a console until the workload reports step >= n.
func waitStep(ctx context.Context, t *testing.T, con *cluster.Console, n int) int {
	t.Helper()
	for {
		m, err := con.Wait(ctx, reStep)
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := strconv.Atoi(m[1]); got >= n {
			return got
		}
	}
}

// waitEnd follows a console to the workload's end and the guest's verdict;
// it returns the digest.
func waitEnd(ctx context.Context, t *testing.T, con *cluster.Console) string {
	t.Helper()
	m, err := con.Wait(ctx, reEnd)
	if err != nil {
		t.Fatal(err)
	}
	if m[1] == "" {
		t.Fatalf("the guest's workload failed: %s", m[2])
	}
	r, err := con.Wait(ctx, reResult)
	if err != nil {
		t.Fatal(err)
	}
	if r[1] != "ok" {
		t.Fatalf("the guest reports %s", r[1])
	}
	return m[1]
}

// referenceLater runs reference in the background; its digest comes on
// the channel.
func referenceLater(ctx context.Context, t *testing.T, steps int) <-chan string {
	want := make(chan string, 1)
	go func() { want <- reference(ctx, t, steps) }()
	return want
}

// reference is the digest of the same workload on a vGPU that never
// moved (the in-process simulator, whose driver is the guest's).
func reference(ctx context.Context, t *testing.T, steps int) string {
	t.Helper()
	h, err := hostd.New(hostd.Config{PoolSize: 2 * e2eVGPUMem, RunDir: t.TempDir(), Log: zerolog.Nop()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	info, err := h.Create(vgpu.Config{Name: "ref", MemSize: e2eVGPUMem})
	if err != nil {
		t.Fatal(err)
	}
	vm, err := sim.StartVM(info.Socket, e2eSeed, guest.WorkloadConfig{}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	if err := vm.Run(ctx, steps); err != nil {
		t.Fatal(err)
	}
	d, err := vm.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(d[:])
}

// checkMigrated checks a successful migration's report and where the VM is.
func checkMigrated(t *testing.T, rep orchestrator.Report, from, to *cluster.Daemon, vm string) {
	t.Helper()
	var sum time.Duration
	for _, term := range rep.Terms {
		if term.D < 0 {
			t.Errorf("term %q negative: %v", term.Name, term.D)
		}
		sum += term.D
	}
	if rep.Downtime <= 0 || sum != rep.Downtime {
		t.Errorf("downtime %v, terms add up to %v", rep.Downtime, sum)
	}
	if !rep.GuestBeats || rep.GuestGap <= 0 {
		t.Errorf("no guest-observed downtime (beats %v, gap %v)", rep.GuestBeats, rep.GuestGap)
	}
	if rep.VMM.Total == 0 || rep.VMM.Downtime <= 0 {
		t.Errorf("QEMU's own migration not reported: %+v", rep.VMM)
	}
	if rep.ConfigWrites == 0 {
		t.Error("no config writes replayed into the destination's front end")
	}
	if vms, err := from.Client.ListVMs(); err != nil || len(vms) != 0 {
		t.Errorf("the source still lists VMs %+v (%v)", vms, err)
	}
	vms, err := to.Client.ListVMs()
	if err != nil || len(vms) != 1 || vms[0].Name != vm || vms[0].State != "running" {
		t.Errorf("the destination lists %+v (%v)", vms, err)
	}
	t.Logf("report:\n%s", rep)
}

// TestMigrateQEMU moves a running Linux VM and its vGPU between two gmigd
// daemons with `gmigd migrate`'s API, A→B in the middle of the guest's
// self-checking workload and back B→A, on each machine type; the guest's
// interrupts keep working on both hosts and its checks and final digest
// pass. The way back puts the vGPU's stop phase on 3 streams.
func TestMigrateQEMU(t *testing.T) {
	e := needEnv(t)
	// Under INTx QEMU traps the aperture while an interrupt is pending
	// (docs/testing.md), so a step costs about 60 times what it does
	// under MSI. The workloads last a minute or two under TCG and are
	// paced to last at least 30 s under KVM; the first migration starts a
	// tenth of the way through, the second a tenth after the guest is seen
	// running at B, which leaves the rest of the workload (at least 18 s)
	// to outlast it.
	for _, c := range []struct {
		machine, irq string
		steps, fps   int
	}{{"pc", "intx", 600, 20}, {"q35", "msi", 4000, 130}} {
		t.Run(c.machine+"-"+c.irq, func(t *testing.T) { migrateBackAndForth(t, e, c.machine, c.irq, c.steps, c.fps, false) })
	}
}

// migrateBackAndForth runs the guest's workload at A, migrates it to B
// (one-shot) and back (iterative) and checks its digest; with verify,
// both migrations run the full hash as the write log's oracle
// (verify_tracking) and must report QEMU's writes logged by uffd-wp.
func migrateBackAndForth(t *testing.T, e env, machine, irq string, steps, fps int, verify bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*e2eTimeout())
	defer cancel()
	p := newPair(t, ctx, e)
	p.dumpOnFailure("vm")
	a, b := p.d[0], p.d[1]
	want := referenceLater(ctx, t, steps)
	// Another tenant first on A, so the vGPU's pool offset differs.
	if _, err := a.Client.Create(hostd.CreateRequest{Name: "neighbour", MemSize: 8 << 20}); err != nil {
		t.Fatal(err)
	}
	conA := p.startVM("vm", e.vmSpec(machine, irq, steps, fps))
	at := waitStep(ctx, t, conA, steps/10)
	t.Logf("A→B at step %d", at)
	rep, err := a.Client.Migrate(ctx, "vm", hostd.MigrateRequest{To: b.Addr, VerifyTracking: verify}, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkMigrated(t, rep, a, b, "vm")
	if verify {
		checkTracked(t, rep)
	}

	conB := cluster.Follow(b.Console("vm"))
	defer conB.Close()
	at = waitStep(ctx, t, conB, at+1)
	at = waitStep(ctx, t, conB, at+steps/10)
	t.Logf("B→A at step %d", at)
	rep, err = b.Client.Migrate(ctx, "vm", hostd.MigrateRequest{To: a.Addr, Strategy: "iterative", Streams: 3, VerifyTracking: verify}, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkMigrated(t, rep, b, a, "vm")
	if n := rep.Precopy.Stop.Streams; n != 3 {
		t.Errorf("B→A stop phase on %d streams, want 3", n)
	}
	if verify {
		checkTracked(t, rep)
	}
	conA2 := cluster.Follow(a.Console("vm"))
	defer conA2.Close()
	got := waitEnd(ctx, t, conA2)
	if w := <-want; got != w {
		t.Fatalf("digest after two migrations %s, never migrated %s", got[:16], w[:16])
	}
	// The guest powers off after its verdict: A says so once and lists
	// the VM as exited.
	if _, err := cluster.WaitLine(ctx, filepath.Join(a.RunDir, "gmigd.log"), reExitedOnItsOwn); err != nil {
		t.Fatalf("gmigd a never logged the VM's QEMU ending: %v", err)
	}
	if vms, err := a.Client.ListVMs(); err != nil || len(vms) != 1 || vms[0].State != "exited" {
		t.Fatalf("after the guest powered off A lists %+v (%v), want vm exited", vms, err)
	}
}

var reExitedOnItsOwn = regexp.MustCompile(`"vm":"vm".*"message":"the VM's QEMU ended on its own`)

// TestMigrateQEMUFailures: the destination gmigd killed while QEMU
// pre-copies RAM, and the destination's QEMU killed in the stop phase,
// before its resume: each time the migration rolls back and the VM runs
// on at the source, the destination keeps nothing; then a migration to a
// fresh destination succeeds and the guest's checks and digest pass.
// The second kill strikes from a fault proxy before the stop phase's first
// bytes reach the destination (faultProxy.onNextSend, armed while QEMU
// pre-copies): a kill sent when the switchover's progress report reached
// the test raced the destination's cont and lost on a loaded CI machine
// (the migration committed, then the kill came).
func TestMigrateQEMUFailures(t *testing.T) {
	e := needEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*e2eTimeout())
	defer cancel()
	const steps, fps = 800, 20
	p := newPair(t, ctx, e)
	p.dumpOnFailure("vm")
	a := p.d[0]
	want := referenceLater(ctx, t, steps)
	conA := p.startVM("vm", e.vmSpec("pc", "intx", steps, fps))
	at := waitStep(ctx, t, conA, 20)

	faults := []struct {
		name   string
		phase  string // the progress phase at which the fault strikes, or is armed
		atStop bool   // armed at phase, it strikes before the stop phase's first bytes reach the destination
		kill   func(b *cluster.Daemon)
	}{
		{"destination gmigd killed during QEMU's pre-copy", orchestrator.PhaseVMMLive, false, func(b *cluster.Daemon) { b.Kill() }},
		{"destination QEMU killed in the stop phase, before cont", orchestrator.PhaseVMMLive, true, func(b *cluster.Daemon) { killQEMU(t, b) }},
	}
	for _, f := range faults {
		b := p.d[1]
		to, strike := b.Addr, func() { f.kill(b) }
		if f.atStop {
			px := newFaultProxy(t, b.Addr)
			to, strike = px.Addr(), func() { px.onNextSend(func() { f.kill(b) }) }
		}
		var once sync.Once
		_, err := a.Client.Migrate(ctx, "vm", hostd.MigrateRequest{To: to}, func(pr orchestrator.Progress) {
			if pr.Phase == f.phase {
				once.Do(strike)
			}
		})
		if err == nil || !strings.Contains(err.Error(), "runs on at the source") {
			t.Fatalf("%s: migration error %v, want a roll-back", f.name, err)
		}
		vms, lerr := a.Client.ListVMs()
		if lerr != nil || len(vms) != 1 || vms[0].State != "running" {
			t.Fatalf("%s: the source lists %+v (%v)", f.name, vms, lerr)
		}
		// The guest runs on at the source: its workload goes on.
		at = waitStep(ctx, t, conA, at+10)
		t.Logf("%s: rolled back (%v); the guest goes on at step %d", f.name, err, at)
		select {
		case <-b.Done():
			// Killed: a restart in its run directory ends the QEMU it left
			// waiting for the migration.
			p.start(ctx, 1)
			b = p.d[1]
			if n := countQEMU(t, b); n != 0 {
				t.Fatalf("%s: the restarted destination left %d QEMU processes of the migration", f.name, n)
			}
		default:
		}
		// Alive: it discarded what it built for the migration.
		if vms, _ := b.Client.ListVMs(); len(vms) != 0 {
			t.Fatalf("%s: the destination kept VMs %+v", f.name, vms)
		}
		if gs, _ := b.Client.List(); len(gs) != 0 {
			t.Fatalf("%s: the destination kept vGPUs %+v", f.name, gs)
		}
	}
	b := p.d[1]
	rep, err := a.Client.Migrate(ctx, "vm", hostd.MigrateRequest{To: b.Addr}, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkMigrated(t, rep, a, b, "vm")
	conB := cluster.Follow(b.Console("vm"))
	defer conB.Close()
	got := waitEnd(ctx, t, conB)
	if w := <-want; got != w {
		t.Fatalf("digest %s, never migrated %s", got[:16], w[:16])
	}
}

// qemuPIDs lists the QEMU processes daemon d started (their QMP sockets
// lie in its run directory).
func qemuPIDs(d *cluster.Daemon) []string {
	out, _ := exec.Command("pgrep", "-f", "qemu-system.*"+regexp.QuoteMeta(d.RunDir+"/")).Output()
	return strings.Fields(string(out))
}

func countQEMU(t *testing.T, d *cluster.Daemon) int {
	t.Helper()
	// The kill is asynchronous: give it the time a process takes to die.
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := len(qemuPIDs(d))
		if n == 0 || time.Now().After(deadline) {
			return n
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// killQEMU kills the QEMU daemon d started for an incoming migration: the
// one whose QMP socket lies in d's run directory.
func killQEMU(t *testing.T, d *cluster.Daemon) {
	t.Helper()
	pids := qemuPIDs(d)
	if len(pids) == 0 {
		t.Errorf("no QEMU of %s to kill", d.Name)
	}
	for _, f := range pids {
		if pid, err := strconv.Atoi(f); err == nil {
			if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
				t.Errorf("killing QEMU %d: %v", pid, err)
			}
		}
	}
}
