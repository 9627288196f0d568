package tests

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"

	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/internal/cluster"
)

// The CUDA probe's console lines (cmd/libcuda/testdata/probe.c, relayed by
// cmd/gmig-guest with its "gmig: " prefix).
var (
	reCUDAIter   = regexp.MustCompile(`gmig: (?:cuda: iter (\d+) checksum [0-9a-f]{16}|result (ok|FAIL))`)
	reCUDADevice = regexp.MustCompile(`gmig: cuda: driver (.*)`)
	reCUDAModule = regexp.MustCompile(`gmig: cuda: cuModuleLoadData\(&m, ptx\) = (\S+)`)
	reCUDADigest = regexp.MustCompile(`gmig: cuda: digest ([0-9a-f]{16})`)
	reCUDAResult = regexp.MustCompile(`gmig: cuda: result (ok|FAIL)`)
)

// cudaRun is what a probe run printed.
type cudaRun struct{ device, module, digest string }

// The probe's run: iterations of 4 MiB of copies each, paced so that the
// run outlasts a migration started a tenth of the way through (at least
// cudaIters*cudaPaceMS ms of guest time).
const (
	cudaIters  = 120
	cudaPaceMS = 100
)

// cudaSpec boots the guest into the CUDA probe instead of gmig-guest's
// own programs.
func (e env) cudaSpec() hostd.StartVMRequest {
	return hostd.StartVMRequest{MemSize: e2eVGPUMem,
		QEMU: e.guestSpec("pc", fmt.Sprintf("gmig.cuda=/usr/bin/cuda-probe,%d,%d", cudaIters, cudaPaceMS), nil)}
}

// waitCUDAIter follows a console until the probe reports iteration >= n;
// the guest's verdict before that fails the test.
func waitCUDAIter(ctx context.Context, t *testing.T, con *cluster.Console, n int) int {
	t.Helper()
	for {
		m, err := con.Wait(ctx, reCUDAIter)
		if err != nil {
			t.Fatal(err)
		}
		if m[2] != "" {
			t.Fatalf("the guest ended (result %s) before the probe's iteration %d", m[2], n)
		}
		if got, _ := strconv.Atoi(m[1]); got >= n {
			return got
		}
	}
}

// waitCUDAEnd follows a console to the probe's digest and verdict and the
// guest's; device and module are what it printed before (empty when the
// console started after them, as a migration's destination's does).
func waitCUDAEnd(ctx context.Context, t *testing.T, con *cluster.Console, head bool) cudaRun {
	t.Helper()
	var run cudaRun
	wait := func(re *regexp.Regexp) string {
		m, err := con.Wait(ctx, re)
		if err != nil {
			t.Fatal(err)
		}
		return m[1]
	}
	if head {
		run.device, run.module = wait(reCUDADevice), wait(reCUDAModule)
	}
	run.digest = wait(reCUDADigest)
	if r := wait(reCUDAResult); r != "ok" {
		t.Fatalf("the probe reports %s", r)
	}
	if r := wait(reResult); r != "ok" {
		t.Fatalf("the guest reports %s", r)
	}
	return run
}

// TestCUDAProgramOnQEMU runs a C program built against NVIDIA's cuda.h in
// a Linux guest through the guest's libcuda.so.1 — device queries,
// allocations, copies, memsets, streams and events, a module load that
// answers CUDA_ERROR_NOT_SUPPORTED (software back end) — twice at once: a
// run that never moves, and a run live-migrated A→B a tenth of the way
// through. Both end with the same digest over every iteration's checksum.
func TestCUDAProgramOnQEMU(t *testing.T) {
	e := needEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*e2eTimeout())
	defer cancel()
	p := newPair(t, ctx, e)
	p.dumpOnFailure("vm")
	a, b := p.d[0], p.d[1]

	ref := e.cudaSpec()
	ref.Name = "ref"
	if _, err := b.Client.StartVM(ref); err != nil {
		t.Fatal(err)
	}
	conRef := cluster.Follow(b.Console("ref"))
	defer conRef.Close()
	moved := e.cudaSpec()
	moved.Name = "vm"
	if _, err := a.Client.StartVM(moved); err != nil {
		t.Fatal(err)
	}
	conA := cluster.Follow(a.Console("vm"))
	defer conA.Close()
	at := waitCUDAIter(ctx, t, conA, cudaIters/10)
	t.Logf("A→B at iteration %d", at)
	rep, err := a.Client.Migrate(ctx, "vm", hostd.MigrateRequest{To: b.Addr}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Downtime <= 0 || !rep.GuestBeats {
		t.Errorf("report: downtime %v, guest heartbeats seen %v", rep.Downtime, rep.GuestBeats)
	}
	t.Logf("report:\n%s", rep)
	conB := cluster.Follow(b.Console("vm"))
	defer conB.Close()
	// B's console holds only what the guest printed after the move.
	t.Logf("B's first iteration %d", waitCUDAIter(ctx, t, conB, 0))
	moved2 := waitCUDAEnd(ctx, t, conB, false)
	first := waitCUDAEnd(ctx, t, conRef, true)
	if first.module != "CUDA_ERROR_NOT_SUPPORTED" {
		t.Fatalf("module load on the software back end answered %s", first.module)
	}
	if moved2.digest != first.digest {
		t.Fatalf("digest after a migration %s, never migrated %s", moved2.digest, first.digest)
	}
	t.Logf("device: %s; digest %s on both", first.device, first.digest)
}
