package tests

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/hostd/qemu"
	"github.com/gmig-dev/gmig/vgpu"
)

// heartbeats records the host time of each guest HEARTBEAT write.
type heartbeats struct {
	mu    sync.Mutex
	beats []beat
}

type beat struct {
	value uint64
	at    time.Time
}

func (h *heartbeats) record(v uint64, at time.Time) {
	h.mu.Lock()
	h.beats = append(h.beats, beat{v, at})
	h.mu.Unlock()
}

// maxGap is the largest host-clock interval between two heartbeats the
// guest wrote one after the other (values v and v+1): the longest the guest
// was seen not running its heartbeat.
func (h *heartbeats) maxGap() (int, time.Duration) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var gap time.Duration
	for i := 1; i < len(h.beats); i++ {
		if h.beats[i].value == h.beats[i-1].value+1 {
			gap = max(gap, h.beats[i].at.Sub(h.beats[i-1].at))
		}
	}
	return len(h.beats), gap
}

// guestSpec is the guest image under QEMU: 512 MiB, 2 vCPUs, this run's
// accelerator, the machine type ("": QEMU's pc), the serial console and
// the guest program's flags in cmdline, extra QEMU arguments.
func (e env) guestSpec(machine, cmdline string, extra []string) qemu.Spec {
	return qemu.Spec{
		Machine: machine, MemoryMB: 512, CPUs: 2, Accel: e.accel, Kernel: e.kernel, Initrd: e.initrd, Extra: extra,
		Append: "console=ttyS0 panic=-1 quiet " + cmdline,
	}
}

// bootGuest starts QEMU with spec on the vGPU at socket, its files in
// runDir and its console to con.
func (e env) bootGuest(ctx context.Context, t *testing.T, spec qemu.Spec, socket, runDir string, con *console) *qemu.VM {
	t.Helper()
	vm, err := qemu.Start(ctx, qemu.Config{Spec: spec, Root: e.root, VfioUser: socket, RunDir: runDir, Serial: con})
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

// runGuest boots the guest and waits for it to power off; when QEMU fails
// the console is dumped.
func (e env) runGuest(ctx context.Context, t *testing.T, spec qemu.Spec, socket, runDir string, con *console) {
	t.Helper()
	if err := e.bootGuest(ctx, t, spec, socket, runDir, con).Wait(ctx); err != nil {
		con.dump()
		t.Fatalf("QEMU: %v", err)
	}
}

// TestGuestOnQEMU boots a Debian kernel under QEMU 11.1 + KVM with a gmig
// vGPU attached over vfio-user; the guest program runs the latency
// measurements, the correctness suite by polling and by interrupt, and a
// short seeded workload with heartbeats; then everything shuts down and
// nothing is left behind.
func TestGuestOnQEMU(t *testing.T) {
	e := needEnv(t)
	runDir := t.TempDir()
	h, err := hostd.New(hostd.Config{PoolSize: 64 << 20, RunDir: runDir, Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.WarnLevel)})
	if err != nil {
		t.Fatal(err)
	}
	// A first vGPU so the guest's lands at a nonzero pool offset.
	if _, err := h.Create(vgpu.Config{Name: "other", MemSize: 8 << 20}); err != nil {
		t.Fatal(err)
	}
	var hb heartbeats
	info, err := h.Create(vgpu.Config{Name: "gpu0", MemSize: 16 << 20, OnHeartbeat: hb.record})
	if err != nil {
		t.Fatal(err)
	}

	con := newConsole(t)
	ctx, cancel := context.WithTimeout(context.Background(), e2eTimeout())
	defer cancel()
	start := time.Now()
	e.runGuest(ctx, t, e.guestSpec("", "gmig.steps=300 gmig.seed=7", nil), info.Socket, runDir, con)
	total := time.Since(start)

	var result, device string
	var bootAt time.Time
	for _, l := range con.gmigLines() {
		t.Log(l.text)
		switch {
		case strings.HasPrefix(l.text, "result "):
			result = l.text
		case strings.HasPrefix(l.text, "device "):
			device, bootAt = l.text, l.at
		}
	}
	if result != "result ok" {
		con.dump()
		t.Fatalf("guest reported %q", result)
	}
	if device == "" {
		t.Fatal("guest never found the device")
	}
	n, gap := hb.maxGap()
	if n < 10 {
		t.Fatalf("host saw %d heartbeats", n)
	}
	t.Logf("boot to device found: %s; whole run %s; %d heartbeats, largest gap %s",
		bootAt.Sub(start).Round(time.Millisecond), total.Round(time.Millisecond), n, gap.Round(time.Microsecond))
	st, _ := h.Get("gpu0")
	if st.Stats.Fences == 0 || st.Stats.Faults == 0 {
		t.Fatalf("device stats %+v: want fences and the suite's deliberate faults", st.Stats)
	}

	if err := h.Close(); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(runDir, "*"))
	vgpuSocks, _ := filepath.Glob(filepath.Join(runDir, "vgpu", "*"))
	for _, f := range append(left, vgpuSocks...) {
		if fi, err := os.Lstat(f); err == nil && fi.Mode()&os.ModeSocket != 0 {
			t.Errorf("socket left behind: %s", f)
		}
	}
}
