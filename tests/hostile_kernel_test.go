package tests

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/hostd/qemu"
	"github.com/gmig-dev/gmig/vgpu"
)

// kernelHostileFor is the kernel attacker's run: longer than the victim's
// boot and program.
const kernelHostileFor = 30 * time.Second

// TestHostileKernelOnQEMU boots two Linux guests under QEMU on one gmigd
// (hostd in this process) whose vGPUs are CUDA vGPUs of the CUDA model
// (GMIG_CUDA_MODEL=1) with device-local memory and guest modules. The
// attacker runs the hostile guest program's kernel attack (gmig-guest
// -hostile=kernel): its own scribble kernel over its own local memory,
// which must land, then over every device address outside it, among them
// every 1 GiB-aligned one of [32 TiB, 96 TiB) where the victim's local
// memory is, each of which must be refused (its first fault fails its
// context, which refuses the rest). The victim runs cuda-vecadd, whose
// kernels compute in its local memory and which prints "vecadd: ok" only
// if every result matched the CPU's.
//
// process: each vGPU in a GPU worker of its own (the default). The victim,
// booted once the attacks have started, ends ok, and afterwards gmigd
// still serves a new CUDA vGPU.
//
// shared: both in gmigd's one CUDA context. The attacker's first fault
// fails that context, the victim's too: the victim, started after it, is
// refused its vGPU or its program fails. The hazard the workers remove.
func TestHostileKernelOnQEMU(t *testing.T) {
	e := needEnv(t)
	t.Setenv(nvidia.ModelEnv, "1")
	t.Run("process", func(t *testing.T) { testHostileKernel(t, e, vgpu.IsolationProcess) })
	t.Run("shared", func(t *testing.T) { testHostileKernel(t, e, vgpu.IsolationShared) })
}

func testHostileKernel(t *testing.T, e env, iso string) {
	h, err := hostd.New(hostd.Config{PoolSize: 3 * (hostileVGPUs + progLocalMem), RunDir: t.TempDir(), Log: zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.ErrorLevel)})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ctx, cancel := context.WithTimeout(context.Background(), e2eTimeout())
	defer cancel()
	cudaVGPU := func(name string, mem uint64) vgpu.Config {
		return vgpu.Config{Name: name, MemSize: mem, Backend: vgpu.BackendCUDA, GuestModules: true,
			LocalMemSize: progLocalMem, GPUIsolation: iso}
	}
	attCon, vicCon := newConsole(t), newConsole(t)
	info, err := h.Create(cudaVGPU("attacker", hostileVGPUs))
	if err != nil {
		t.Fatalf("gmigd refuses the attacker's CUDA vGPU: %v", err)
	}
	start := time.Now()
	// "hostile step 1" is reported once the first kernel step is done
	// (the first fault, and the whole region); in a shared context that
	// step is the point, and the program ends after it.
	hostileFor, firstStep := kernelHostileFor, "gmig: hostile step 1 "
	if iso == vgpu.IsolationShared {
		hostileFor, firstStep = time.Second, "gmig: hostile done"
	}
	att := e.bootGuest(ctx, t, e.guestSpec("", fmt.Sprintf("gmig.irq=msi gmig.measure=0 gmig.suite=false gmig.seed=9 gmig.hostile=kernel gmig.hostile-for=%s gmig.progress=1", hostileFor), MSIExtra),
		info.Socket, t.TempDir(), attCon)
	if err := waitLine(ctx, attCon, firstStep); err != nil {
		attCon.dump()
		t.Fatal(err)
	}
	attacked := time.Since(start)
	vms, cons := []*qemu.VM{att}, []*console{attCon}
	info, err = h.Create(cudaVGPU("victim", hostileVGPUs))
	switch {
	case err != nil && iso == vgpu.IsolationShared:
		t.Logf("the hazard: gmigd refuses the victim's vGPU in the context the attacker's kernel failed: %v", err)
	case err != nil:
		t.Fatalf("gmigd refuses the victim's CUDA vGPU: %v", err)
	default:
		vic := e.bootGuest(ctx, t, e.guestSpec("pc", "gmig.cuda=/usr/bin/cuda-vecadd,65536,"+strconv.Itoa(progIters)+","+strconv.Itoa(progPaceMS), nil),
			info.Socket, t.TempDir(), vicCon)
		vms, cons = append(vms, vic), append(cons, vicCon)
	}
	waitGuests(ctx, t, vms, cons)
	t.Logf("first kernel step done %s after boot; guests done after %s", attacked.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	// The attacker: every attempt refused, the whole region among them.
	var done []string
	var attEnd, vicEnd time.Time
	for _, l := range attCon.gmigLines() {
		if m := reHostileDone.FindStringSubmatch(l.text); m != nil {
			done, attEnd = m, l.at
			t.Logf("attacker: %s", l.text)
		}
	}
	if done == nil || done[4] != "0" || done[2] != done[3] {
		attCon.dump()
		t.Fatalf("the hostile program's report: %q", done)
	}
	if n, _ := strconv.Atoi(done[2]); n < 65536 {
		attCon.dump()
		t.Fatalf("the kernel attack made %d attempts, fewer than the region's 65536 addresses", n)
	}
	if r := lastResult(attCon); r != "result ok" {
		attCon.dump()
		t.Fatalf("attacker reported %q", r)
	}
	st, _ := h.Get("attacker")
	t.Logf("attacker vGPU: %+v", st.Stats)
	if st.Stats.Faults == 0 {
		t.Error("the attacker's refused launches were not counted as faults")
	}
	// The victim: its results matched the CPU's, during the attacks.
	var ok, exit0 bool
	for _, l := range vicCon.gmigLines() {
		switch l.text {
		case "vecadd: ok":
			ok, vicEnd = true, l.at
		case "cuda exit 0":
			exit0 = true
		}
	}
	if iso == vgpu.IsolationShared {
		if ok || exit0 {
			vicCon.dump()
			t.Fatal("in a shared context the victim's program ended ok after the attacker's kernel faulted (the hazard the test must see)")
		}
		return
	}
	if !ok || !exit0 {
		vicCon.dump()
		t.Fatalf("the victim's cuda-vecadd beside the kernel attack: ok %v, exit 0 %v", ok, exit0)
	}
	if !vicEnd.Before(attEnd) {
		t.Errorf("the victim's program ended at %s, after the attacks (%s): lengthen kernelHostileFor",
			vicEnd.Sub(start).Round(time.Millisecond), attEnd.Sub(start).Round(time.Millisecond))
	}

	// gmigd still serves: a new CUDA vGPU runs a checked workload.
	stillServes(ctx, t, h, cudaVGPU("fresh", 4<<20))
}
