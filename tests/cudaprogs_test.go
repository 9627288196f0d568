package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/internal/cluster"
	"github.com/gmig-dev/gmig/vgpu"
)

// The evidence programs in the guest image (/usr/bin/cuda-PROG, built from
// cmd/libcuda/testdata; docs/cuda.md, "Programs"), each run for progIters
// iterations progPaceMS apart, so that a migration started a tenth of the
// way through lands mid-run.
const (
	progIters  = 40
	progPaceMS = 100
	// progLocalMem is the vGPU's device-local memory, where the programs'
	// allocations live on the CUDA back end: more than the largest run
	// below allocates (streams: 4 streams × 3 buffers × 64 KiB).
	progLocalMem = 32 << 20
)

// guestPrograms are the runs of the programs the migration test makes:
// the program and its arguments before ITERS and PACE (streams takes its
// buffer size after them).
var guestPrograms = []struct {
	prog string
	args func(iters, pace int) string
}{
	{"streams", func(i, p int) string { return fmt.Sprintf("%d,%d,16384", i, p) }},
	{"vecadd", func(i, p int) string { return fmt.Sprintf("65536,%d,%d", i, p) }},
	{"matmul", func(i, p int) string { return fmt.Sprintf("64,%d,%d", i, p) }},
}

// reCUDAExit is gmig-guest's line after the program it ran exits.
var reCUDAExit = regexp.MustCompile(`gmig: cuda exit (-?\d+)`)

// progSpec boots the guest into /usr/bin/cuda-PROG with args.
func (e env) progSpec(name, prog, args string) hostd.StartVMRequest {
	return hostd.StartVMRequest{Name: name, MemSize: e2eVGPUMem,
		QEMU: e.guestSpec("pc", fmt.Sprintf("gmig.cuda=/usr/bin/cuda-%s,%s", prog, args), nil)}
}

// TestCUDAProgramsInGuestImage boots the guest image into cuda-vecadd on a
// vGPU of the software back end, which runs no modules: the program, its
// libraries and libcuda.so.1 load in the guest, and it stops at its module
// load with the documented error, CUDA_ERROR_NOT_SUPPORTED, exit status 1.
func TestCUDAProgramsInGuestImage(t *testing.T) {
	e := needEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), e2eTimeout())
	defer cancel()
	p := newPair(t, ctx, e)
	p.dumpOnFailure("vecadd")
	if _, err := p.d[0].Client.StartVM(e.progSpec("vecadd", "vecadd", "4096")); err != nil {
		t.Fatal(err)
	}
	con := cluster.Follow(p.d[0].Console("vecadd"))
	defer con.Close()
	m, err := con.Wait(ctx, regexp.MustCompile(`gmig: (?:vecadd: FAIL cuModuleLoadData\(&mod, kernels_ptx\): (\S+)|result (ok|FAIL))`))
	if err != nil {
		t.Fatal(err)
	}
	if m[2] != "" {
		t.Fatalf("the guest ended (result %s) before cuda-vecadd's module load", m[2])
	}
	if m[1] != "CUDA_ERROR_NOT_SUPPORTED" {
		t.Fatalf("the module load on the software back end answered %s", m[1])
	}
	if m, err = con.Wait(ctx, reCUDAExit); err != nil || m[1] != "1" {
		t.Fatalf("cuda-vecadd's exit: %v %v", m, err)
	}
}

// TestCUDAProgramsMigrateOnQEMU runs cuda-streams, cuda-vecadd and
// cuda-matmul in Linux guests through the guest's libcuda.so.1 on CUDA
// vGPUs (the model of a GPU, GMIG_CUDA_MODEL: one model GPU per gmigd)
// with device-local memory and guest modules, so their kernels run
// (LAUNCH_GRID, ABI 1.3). Each program runs twice at once: never moved,
// and live-migrated A→B a tenth of the way through. Both runs must end ok
// and print the same lines but for the timing ones ("time: ...").
func TestCUDAProgramsMigrateOnQEMU(t *testing.T) {
	if abi.NumOps <= abi.OpLaunchGrid {
		t.Skip("pending: the device does not run LAUNCH_GRID yet (abi.NumOps does not count opcode 11)")
	}
	e := needEnv(t)
	t.Setenv("GMIG_CUDA_MODEL", "2")
	locks := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(len(guestPrograms))*2*e2eTimeout())
	defer cancel()
	p := newPairWith(t, ctx, e, true, func(i int) []string {
		return []string{"-gpu", strconv.Itoa(i), "-gpu-lock-dir", locks}
	})
	a, b := p.d[0], p.d[1]
	for _, g := range guestPrograms {
		t.Run(g.prog, func(t *testing.T) {
			ref, moved := "ref-"+g.prog, "vm-"+g.prog
			p.dumpOnFailure(moved)
			args := g.args(progIters, progPaceMS)
			// The program's two VMs give the daemons' pools back to the
			// next program's (two of them do not fit beside two more).
			defer func() {
				_ = a.Client.StopVM(moved)
				_ = b.Client.StopVM(moved)
				_ = b.Client.StopVM(ref)
			}()
			startCUDAVM(t, b, e.progSpec(ref, g.prog, args))
			startCUDAVM(t, a, e.progSpec(moved, g.prog, args))
			conA := cluster.Follow(a.Console(moved))
			defer conA.Close()
			reIter := regexp.MustCompile(`gmig: ` + g.prog + `: iter (\d+) digest`)
			for {
				m, err := conA.Wait(ctx, reIter)
				if err != nil {
					t.Fatal(err)
				}
				if n, _ := strconv.Atoi(m[1]); n >= progIters/10 {
					t.Logf("A→B at iteration %d", n)
					break
				}
			}
			rep, err := a.Client.Migrate(ctx, moved, hostd.MigrateRequest{To: b.Addr}, nil)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Downtime <= 0 || !rep.GuestBeats {
				t.Errorf("report: downtime %v, guest heartbeats seen %v", rep.Downtime, rep.GuestBeats)
			}
			t.Logf("report:\n%s", rep)
			for _, con := range []string{b.Console(moved), b.Console(ref)} {
				c := cluster.Follow(con)
				m, err := c.Wait(ctx, reCUDAExit)
				c.Close()
				if err != nil || m[1] != "0" {
					t.Fatalf("%s: cuda exit %v (%v)", con, m, err)
				}
			}
			want := programLines(t, g.prog, b.Console(ref))
			got := programLines(t, g.prog, a.Console(moved), b.Console(moved))
			if len(want) == 0 || want[len(want)-1] != g.prog+": ok" {
				t.Fatalf("the never-migrated run did not end ok:\n%s", strings.Join(want, "\n"))
			}
			if strings.Join(got, "\n") != strings.Join(want, "\n") {
				t.Fatalf("migrated run printed:\n%s\nnever migrated:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
			}
			t.Logf("%d lines the same on both, last digest line %q", len(want), want[len(want)-2])
		})
	}
}

// programLines is what program prog printed (its lines, which begin with
// "PROG:", without gmig-guest's "gmig: " prefix; timing lines begin with
// "time:" and are left out) in the console logs at paths, read one after
// the other as one stream: a migrated VM's console begins on its source
// and ends on its destination, where a line may have been cut in two.
// gmigd's own marker lines (hostd.ConsoleMarker) are dropped first.
func programLines(t *testing.T, prog string, paths ...string) []string {
	t.Helper()
	var logs [][]byte
	for _, path := range paths {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		logs = append(logs, b)
	}
	var out []string
	for _, l := range cluster.JoinConsoles(logs...) {
		if rest, ok := strings.CutPrefix(l, "gmig: "); ok && strings.HasPrefix(rest, prog+": ") {
			out = append(out, rest)
		}
	}
	return out
}

// startCUDAVM starts a VM at daemon d as StartVM does, its vGPU on the
// CUDA back end with guest modules and progLocalMem of device-local
// memory.
func startCUDAVM(t *testing.T, d *cluster.Daemon, req hostd.StartVMRequest) {
	t.Helper()
	req.Backend, req.GuestModules, req.LocalMemSize = vgpu.BackendCUDA, true, progLocalMem
	if _, err := d.Client.StartVM(req); err != nil {
		t.Fatalf("gmigd %s refuses VM %s on a cuda vGPU with guest modules and local memory: %v", d.Name, req.Name, err)
	}
}

// TestProgramLinesJoinsConsoles checks programLines on a migrated VM's two
// console logs: a line the guest began on the source and ended on the
// destination comes back whole, gmigd's markers, gmig-guest's own lines,
// other programs' lines and timing lines do not.
func TestProgramLinesJoinsConsoles(t *testing.T) {
	dir := t.TempDir()
	src, dst := filepath.Join(dir, "a.log"), filepath.Join(dir, "b.log")
	for path, text := range map[string]string{
		src: hostd.ConsoleMarker + " VM vm: QEMU started\ngmig: cuda: running /usr/bin/cuda-x\r\ngmig: x: iter 0 digest 01\r\ngmig: x: it",
		dst: hostd.ConsoleMarker + " VM vm: QEMU waiting for an incoming migration\ner 1 digest 02\r\ngmig: time: x 3 ms\r\ngmig: y: 1\r\ngmig: x: ok\r\ngmig: cuda exit 0\r\n",
	} {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	got := strings.Join(programLines(t, "x", src, dst), "|")
	if want := "x: iter 0 digest 01|x: iter 1 digest 02|x: ok"; got != want {
		t.Fatalf("programLines: %q, want %q", got, want)
	}
}
