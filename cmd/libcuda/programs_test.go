package main

import (
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/vgpu"
)

// The evidence programs (testdata/*.c, docs/cuda.md "Programs").
var programs = []string{"vecadd", "matmul", "streams", "launchrate", "copybw"}

// buildPrograms compiles each of programs against NVIDIA's cuda.h (as
// buildProbe does the probe), linked with libDir's libcuda.so.1, into
// libDir; it skips the test, saying why, where that header is not there.
func buildPrograms(t *testing.T, libDir string) map[string]string {
	t.Helper()
	inc := cudaInclude(t)
	bins := map[string]string{}
	for _, p := range programs {
		bin := filepath.Join(libDir, p)
		cmd := exec.Command("gcc", "-O2", "-Wall", "-Werror", "-I"+inc, "-o", bin,
			filepath.Join("testdata", p+".c"), filepath.Join(libDir, "libcuda.so.1"))
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", p, err, out)
		}
		bins[p] = bin
	}
	return bins
}

// cudaInclude is the directory of NVIDIA's cuda.h that provisioning keeps
// (scripts/provision.sh: $GMIG_CACHE, or the repository's .cache); it
// skips the test where there is none.
func cudaInclude(t *testing.T) string {
	t.Helper()
	cache := os.Getenv("GMIG_CACHE")
	if cache == "" {
		cache = filepath.Join("..", "..", ".cache")
	}
	inc := filepath.Join(cache, "cuda", "include")
	if _, err := os.Stat(filepath.Join(inc, "cuda.h")); err != nil {
		t.Skipf("skipping: no NVIDIA cuda.h to build the programs against (%v; run `make provision`)", err)
	}
	return inc
}

// runProgram runs bin with args against the vGPU on socket, through
// libDir's library, and returns what it printed and its exit status.
func runProgram(t *testing.T, libDir, socket, bin string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+libDir, "GMIG_CUDA_SOCKET="+socket)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	case err != nil:
		t.Fatalf("%s: %v\n%s", bin, err, out)
	}
	return string(out), 0
}

// runVecaddPy runs testdata/vecadd.py with args as runProgram runs a
// program, on the stand-in for cuda-python's driver bindings in
// testdata/fakebindings (the same calls over ctypes), so it reaches the
// same libcuda.so.1; it skips the test where there is no python3.
func runVecaddPy(t *testing.T, libDir, socket string, args ...string) (string, int) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("skipping: no python3 for vecadd.py")
	}
	fake, err := filepath.Abs(filepath.Join("testdata", "fakebindings"))
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("PYTHONPATH", fake)
	t.Setenv("PYTHONDONTWRITEBYTECODE", "1")
	return runProgram(t, libDir, socket, py, append([]string{filepath.Join("testdata", "vecadd.py")}, args...)...)
}

// linesOf is the lines of out that program prog printed itself (they
// begin with "PROG: "): without the library's log lines and the timing
// lines ("time: ..."), so the same on every run and every device.
func linesOf(prog, out string) string {
	var keep []string
	for _, l := range strings.SplitAfter(out, "\n") {
		if strings.HasPrefix(l, prog+": ") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "")
}

// TestProgramsOnSoftwareBackend runs the evidence programs against a vGPU
// of the software back end, which runs no modules: each program that loads
// its kernels stops at the module load with the documented error
// (CUDA_ERROR_NOT_SUPPORTED, docs/cuda.md) and exits 1; copybw, which
// launches nothing, runs to the end, pinned rows (cuMemAllocHost) included,
// with every copy checked. vecadd.py
// stops where vecadd does and prints the same.
func TestProgramsOnSoftwareBackend(t *testing.T) {
	dir := buildLib(t)
	bins := buildPrograms(t, dir)
	s := migtest.ServeNew(t, migtest.NewPool(t, 32<<20), "progs", 16<<20)
	for _, p := range []string{"vecadd", "matmul", "streams", "launchrate"} {
		out, code := runProgram(t, dir, s.Path, bins[p])
		want := p + ": FAIL cuModuleLoadData(&mod, kernels_ptx): CUDA_ERROR_NOT_SUPPORTED\n"
		if code != 1 || !strings.Contains(out, want) {
			t.Fatalf("%s exited %d, want 1 after %q:\n%s", p, code, want, out)
		}
	}
	// vecadd.py stops where vecadd does, saying the same.
	c, _ := runProgram(t, dir, s.Path, bins["vecadd"], "4096")
	if py, code := runVecaddPy(t, dir, s.Path, "4096"); code != 1 || linesOf("vecadd", py) != linesOf("vecadd", c) {
		t.Fatalf("vecadd.py exited %d printing:\n%s\nvecadd printed:\n%s", code, py, c)
	}
	out, code := runProgram(t, dir, s.Path, bins["copybw"], "4", "2")
	for _, want := range []string{
		`(?m)^copybw: 4 MiB, 2 rounds$`,
		`(?m)^time: HtoD pageable [0-9.]+ GB/s$`,
		`(?m)^time: DtoH pageable [0-9.]+ GB/s$`,
		`(?m)^time: HtoD pinned [0-9.]+ GB/s$`,
		`(?m)^time: DtoH pinned [0-9.]+ GB/s$`,
		`(?m)^copybw: ok$`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Fatalf("copybw (exit %d) printed no %s:\n%s", code, want, out)
		}
	}
	if code != 0 {
		t.Fatalf("copybw exited %d:\n%s", code, out)
	}
}

// TestProgramsOverSimulator runs every evidence program against a vGPU
// served in this process on the CUDA back end's model of a GPU
// (GMIG_CUDA_MODEL), with device-local memory and guest modules: the
// kernels run (LAUNCH_GRID, ABI 1.3) and each program checks its results
// against the CPU's to the bit; two runs print the same lines but for the
// timing ones.
func TestProgramsOverSimulator(t *testing.T) {
	if abi.NumOps <= abi.OpLaunchGrid {
		t.Skip("pending: the device does not run LAUNCH_GRID yet (abi.NumOps does not count opcode 11)")
	}
	migtest.UseCUDAModel(t)
	dir := buildLib(t)
	bins := buildPrograms(t, dir)
	cfg := vgpu.Config{Name: "progs", MemSize: 16 << 20, Backend: vgpu.BackendCUDA, GuestModules: true, LocalMemSize: 64 << 20}
	v, err := vgpu.New(cfg, migtest.NewPool(t, 2*(cfg.MemSize+cfg.LocalMemSize)), migtest.Log) // the pool holds local memory too
	if errors.Is(err, vgpu.ErrConfig) {
		t.Skipf("pending: %v (the CUDA back end's device-local memory has not landed)", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	if caps := v.Spec().Caps; caps&abi.CapLaunchGrid == 0 {
		v.Close()
		t.Fatalf("CAPS %#x: no CapLaunchGrid on a cuda vGPU with local memory and guest modules", caps)
	}
	s := migtest.Serve(t, v)
	for _, run := range []struct {
		prog string
		args []string
		want []string // patterns of lines, besides "PROG: ok"
	}{
		{"vecadd", []string{"65536", "2"}, []string{`vecadd: n 65536`, `vecadd: iter 1 digest [0-9a-f]{16}`}},
		{"matmul", []string{"64", "2"}, []string{`matmul: n 64`, `matmul: iter 1 digest [0-9a-f]{16}`}},
		{"streams", []string{"3", "0", "4096"}, []string{`streams: iter 2 stream 3 digest [0-9a-f]{16}`,
			`time: streams iter 2 stream 3 [0-9.]+ ms`, `streams: digest [0-9a-f]{16}`}},
		// A ballast of 8 MiB, 4 of it rewritten every iteration and
		// checked word by word at the end.
		{"streams", []string{"3", "0", "4096", "8", "4"}, []string{`streams: ballast 8 MiB in 1 allocations`,
			`streams: churn 4 MiB digest [0-9a-f]{16}`, `streams: digest [0-9a-f]{16}`}},
		{"launchrate", []string{"1000", "1"}, []string{`time: launches/s [0-9]+`}},
		{"copybw", []string{"4", "1"}, []string{`time: HtoD pageable [0-9.]+ GB/s`}},
	} {
		t.Run(run.prog, func(t *testing.T) {
			first, code := runProgram(t, dir, s.Path, bins[run.prog], run.args...)
			if code != 0 {
				t.Fatalf("%s exited %d:\n%s", run.prog, code, first)
			}
			for _, want := range append(run.want, run.prog+`: ok`) {
				if !regexp.MustCompile(`(?m)^` + want + `$`).MatchString(first) {
					t.Fatalf("%s printed no %s:\n%s", run.prog, want, first)
				}
			}
			again, _ := runProgram(t, dir, s.Path, bins[run.prog], run.args...)
			if a, b := linesOf(run.prog, first), linesOf(run.prog, again); a != b {
				t.Fatalf("two runs of %s differ:\n%s\nthen:\n%s", run.prog, a, b)
			}
		})
	}
}

// TestProgramsSharePTX checks that vecadd.py carries the C programs' PTX
// module (cudaprog.h) unchanged, kernel for kernel.
func TestProgramsSharePTX(t *testing.T) {
	c := cModulePTX(t)
	py := pyModulePTX(t)
	if c != py {
		t.Fatalf("testdata/vecadd.py's PTX differs from testdata/cudaprog.h's:\n%s\n---\n%s", py, c)
	}
	for _, entry := range []string{"vecAdd", "scaleAdd", "matMulTiled", "empty"} {
		if !strings.Contains(c, ".visible .entry "+entry+"(") {
			t.Fatalf("cudaprog.h's PTX has no entry %s", entry)
		}
	}
	if strings.Contains(c, "fma") || strings.Contains(c, "mad.f32") || strings.Contains(c, "mad.rn") {
		t.Fatal("the kernels' PTX fuses a multiply and an add: the CPU's float arithmetic would differ")
	}
}

// cModulePTX is the text of kernels_ptx in testdata/cudaprog.h: one C
// string literal per line, escapes \n, \t and \" only.
func cModulePTX(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "cudaprog.h"))
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	start := strings.Index(src, "kernels_ptx[] =\n")
	end := strings.Index(src[start:], ";\n")
	if start < 0 || end < 0 {
		t.Fatal("testdata/cudaprog.h: no kernels_ptx")
	}
	var ptx strings.Builder
	lit := regexp.MustCompile(`(?m)^\t"(.*)"$`)
	for _, m := range lit.FindAllStringSubmatch(src[start:start+end], -1) {
		ptx.WriteString(strings.NewReplacer(`\n`, "\n", `\t`, "\t", `\"`, `"`).Replace(m[1]))
	}
	return ptx.String()
}

// pyModulePTX is the PTX in testdata/vecadd.py: the text between
// `PTX = """\` and `"""`, with real tabs and newlines.
func pyModulePTX(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "vecadd.py"))
	if err != nil {
		t.Fatal(err)
	}
	src := string(b)
	const open = "PTX = \"\"\"\\\n"
	start := strings.Index(src, open)
	if start < 0 {
		t.Fatalf("testdata/vecadd.py: no %q", open)
	}
	rest := src[start+len(open):]
	end := strings.Index(rest, `"""`)
	if end < 0 {
		t.Fatal("testdata/vecadd.py: PTX not closed")
	}
	return rest[:end]
}

// TestProgramsOnFakeDriver runs the evidence programs' host side against
// testdata/fakecuda.c, a stand-in libcuda.so.1 that plays the kernels in C
// at once, in call order: every program ends ok (its CPU reference agrees
// with the kernels as the contract defines them), vecadd's digests are
// the ones Go computes for the same inputs and vecadd.py prints what
// vecadd prints, and copybw fills its pinned rows where cuMemAllocHost
// succeeds.
func TestProgramsOnFakeDriver(t *testing.T) {
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no C compiler")
	}
	inc := cudaInclude(t)
	dir := t.TempDir()
	cmd := exec.Command("gcc", "-O2", "-Wall", "-Werror", "-shared", "-fPIC", "-ffp-contract=off", "-I"+inc,
		"-Wl,-soname,libcuda.so.1", "-o", filepath.Join(dir, "libcuda.so.1"), filepath.Join("testdata", "fakecuda.c"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building testdata/fakecuda.c: %v\n%s", err, out)
	}
	bins := buildPrograms(t, dir)
	for _, run := range []struct {
		prog string
		args []string
	}{
		{"vecadd", []string{"1000", "2"}},
		{"matmul", []string{"48", "2"}},
		{"streams", []string{"2", "0", "1000"}},
		{"launchrate", []string{"100", "1"}},
		{"copybw", []string{"2", "1"}},
	} {
		out, code := runProgram(t, dir, "", bins[run.prog], run.args...)
		if code != 0 || !strings.HasSuffix(out, run.prog+": ok\n") {
			t.Fatalf("%s %v exited %d:\n%s", run.prog, run.args, code, out)
		}
		if again, _ := runProgram(t, dir, "", bins[run.prog], run.args...); linesOf(run.prog, again) != linesOf(run.prog, out) {
			t.Fatalf("two runs of %s differ:\n%s\nthen:\n%s", run.prog, out, again)
		}
		switch run.prog {
		case "vecadd":
			for it := 0; it < 2; it++ {
				a, b := fillFloats(1000, uint32(2*it+1)), fillFloats(1000, uint32(2*it+2))
				c := make([]float32, len(a))
				for i := range c {
					c[i] = a[i] + b[i]
				}
				want := fmt.Sprintf("vecadd: iter %d digest %016x\n", it, fnv1a(f32Bytes(c)))
				if !strings.Contains(out, want) {
					t.Fatalf("vecadd printed no %q:\n%s", want, out)
				}
			}
			if py, code := runVecaddPy(t, dir, "", run.args...); code != 0 || linesOf("vecadd", py) != linesOf("vecadd", out) {
				t.Fatalf("vecadd.py exited %d printing:\n%s\nvecadd printed:\n%s", code, py, out)
			}
		case "copybw":
			if !strings.Contains(out, "time: HtoD pinned ") {
				t.Fatalf("copybw skipped its pinned rows:\n%s", out)
			}
		}
	}
}

// fnv1a is the programs' digest: FNV-1a, 64 bits.
func fnv1a(b []byte) uint64 {
	h := fnv.New64a()
	h.Write(b)
	return h.Sum64()
}
