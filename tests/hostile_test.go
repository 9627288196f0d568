package tests

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/hostd/qemu"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/vgpu"
)

// The hostile guest program's console lines (cmd/gmig-guest -hostile).
var (
	reHostileDone = regexp.MustCompile(`^hostile done steps=(\d+) .* attempts=(\d+) refused=(\d+) failures=(\d+) resets=(\d+)`)
	reWorkloadEnd = regexp.MustCompile(`^workload seed=\d+ steps=\d+ in \S+ digest=([0-9a-f]{64})`)
)

const (
	hostileFor   = 30 * time.Second // the attacker's run: longer than the victim's boot and workload
	victimSteps  = 300
	hostileVGPUs = 16 << 20
)

// TestHostileGuestOnQEMU boots two Linux guests under QEMU on one gmigd
// (hostd in this process), both taking MSI: the attacker runs the hostile
// guest program (gmig-guest -hostile=all: out-of-partition GTT entries,
// DMA outside guest RAM, oversized and overlapping copies, malformed and
// endless command streams, interrupt storms, resets in the middle of a
// batch) for a minute; the victim, booted once the attacks have started,
// runs the checked seeded workload meanwhile. Every attempt is refused,
// the victim's checks pass and its digest equals the same workload's on a
// vGPU no one attacked, and afterwards gmigd still serves a new vGPU.
func TestHostileGuestOnQEMU(t *testing.T) {
	e := needEnv(t)
	runDir := t.TempDir()
	h, err := hostd.New(hostd.Config{PoolSize: 3 * hostileVGPUs, RunDir: runDir, Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), e2eTimeout())
	defer cancel()
	want := referenceLater(ctx, t, victimSteps)

	boot := func(name, args string, con *console) *qemu.VM {
		info, err := h.Create(vgpu.Config{Name: name, MemSize: hostileVGPUs})
		if err != nil {
			t.Fatal(err)
		}
		return e.bootGuest(ctx, t, e.guestSpec("", "gmig.irq=msi gmig.measure=0 gmig.suite=false "+args, MSIExtra), info.Socket, t.TempDir(), con)
	}
	attCon, vicCon := newConsole(t), newConsole(t)
	start := time.Now()
	att := boot("attacker", fmt.Sprintf("gmig.seed=9 gmig.hostile=all gmig.hostile-for=%s gmig.progress=25", hostileFor), attCon)
	if err := waitLine(ctx, attCon, "gmig: hostile started"); err != nil {
		attCon.dump()
		t.Fatal(err)
	}
	attacking := time.Since(start)
	vic := boot("victim", fmt.Sprintf("gmig.seed=%d gmig.steps=%d gmig.check=true gmig.progress=50", e2eSeed, victimSteps), vicCon)

	waitGuests(ctx, t, []*qemu.VM{att, vic}, []*console{attCon, vicCon})
	t.Logf("attacks started %s after boot; both guests done after %s", attacking.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	// The attacker: every attempt refused.
	var done []string
	var attEnd, vicEnd time.Time
	for _, l := range attCon.gmigLines() {
		if strings.HasPrefix(l.text, "hostile") || strings.HasPrefix(l.text, "result") {
			t.Logf("attacker: %s", l.text)
		}
		if m := reHostileDone.FindStringSubmatch(l.text); m != nil {
			done, attEnd = m, l.at
		}
	}
	if done == nil || done[4] != "0" || done[2] != done[3] || done[5] == "0" {
		attCon.dump()
		t.Fatalf("the hostile program's report: %q", done)
	}
	if r := lastResult(attCon); r != "result ok" {
		attCon.dump()
		t.Fatalf("attacker reported %q", r)
	}
	// The victim: checks pass, digest as never attacked, run while the
	// attacks went on.
	var got string
	for _, l := range vicCon.gmigLines() {
		t.Logf("victim: %s", l.text)
		if m := reWorkloadEnd.FindStringSubmatch(l.text); m != nil {
			got, vicEnd = m[1], l.at
		}
	}
	if r := lastResult(vicCon); r != "result ok" || got == "" {
		vicCon.dump()
		t.Fatalf("victim reported %q (digest %q)", r, got)
	}
	if !vicEnd.Before(attEnd) {
		t.Errorf("the victim's workload ended at %s, after the attacks (%s): lengthen hostileFor",
			vicEnd.Sub(start).Round(time.Millisecond), attEnd.Sub(start).Round(time.Millisecond))
	}
	if w := <-want; got != w {
		t.Fatalf("victim digest %s beside the hostile guest, never attacked %s", got[:16], w[:16])
	}
	st, _ := h.Get("attacker")
	t.Logf("attacker vGPU: %+v", st.Stats)
	if st.Stats.Faults == 0 {
		t.Error("the attacker's refused commands were not counted as faults")
	}

	stillServes(ctx, t, h, vgpu.Config{Name: "fresh", MemSize: 4 << 20})
}

// stillServes checks that gmigd serves after the attacks: a new vGPU of
// cfg runs a checked workload to its digest.
func stillServes(ctx context.Context, t *testing.T, h *hostd.Host, cfg vgpu.Config) {
	t.Helper()
	info, err := h.Create(cfg)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := sim.StartVM(info.Socket, 3, guest.WorkloadConfig{Check: true}, sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer vm.Close()
	if err := vm.Run(ctx, 20); err != nil {
		t.Fatalf("a new %s vGPU after the attacks: %v", cfg.Backend, err)
	}
	if _, err := vm.Digest(); err != nil {
		t.Fatal(err)
	}
}

// waitLine waits for a console line starting with prefix.
func waitLine(ctx context.Context, c *console, prefix string) error {
	for {
		select {
		case l := <-c.seen:
			if i := strings.Index(l, prefix); i >= 0 {
				return nil
			}
		case <-ctx.Done():
			return fmt.Errorf("waiting for %q: %w", prefix, ctx.Err())
		}
	}
}

// lastResult is the guest program's verdict line.
func lastResult(c *console) string {
	var r string
	for _, l := range c.gmigLines() {
		if strings.HasPrefix(l.text, "result ") {
			r = l.text
		}
	}
	return r
}

// waitGuests waits for every VM of vms to end, at once; a QEMU that
// failed fails the test with its console (cons[i] is vms[i]'s) dumped.
func waitGuests(ctx context.Context, t *testing.T, vms []*qemu.VM, cons []*console) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make([]error, len(vms))
	for i, vm := range vms {
		wg.Add(1)
		go func() { defer wg.Done(); errs[i] = vm.Wait(ctx) }()
	}
	wg.Wait()
	for i, con := range cons {
		if errs[i] != nil {
			con.dump()
			t.Fatalf("QEMU: %v", errs[i])
		}
	}
}
