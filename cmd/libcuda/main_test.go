package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/gmig-dev/gmig/internal/migtest"
)

// buildLib builds libcuda.so.1 into a temporary directory.
func buildLib(t *testing.T) string {
	t.Helper()
	if _, err := exec.LookPath("gcc"); err != nil {
		t.Skip("no C compiler for cgo")
	}
	dir := t.TempDir()
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-ldflags=-extldflags=-Wl,-soname,libcuda.so.1",
		"-o", filepath.Join(dir, "libcuda.so.1"), ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building libcuda.so.1: %v\n%s", err, out)
	}
	return dir
}

// buildProbe compiles testdata/probe.c against NVIDIA's cuda.h, which
// provisioning keeps under the cache (scripts/provision.sh: $GMIG_CACHE, or
// the repository's .cache), linked with libDir's libcuda.so.1; it skips the
// test, saying why, where that header is not there.
func buildProbe(t *testing.T, libDir string) string {
	t.Helper()
	cache := os.Getenv("GMIG_CACHE")
	if cache == "" {
		cache = filepath.Join("..", "..", ".cache")
	}
	inc := filepath.Join(cache, "cuda", "include")
	if _, err := os.Stat(filepath.Join(inc, "cuda.h")); err != nil {
		t.Skipf("skipping: no NVIDIA cuda.h to build the probe against (%v; run `make provision`)", err)
	}
	probe := filepath.Join(t.TempDir(), "probe")
	cmd := exec.Command("gcc", "-O2", "-I"+inc, "-o", probe, filepath.Join("testdata", "probe.c"), filepath.Join(libDir, "libcuda.so.1"))
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building the probe: %v\n%s", err, out)
	}
	return probe
}

// TestProbeOverSimulator runs the probe — a C program written against
// NVIDIA's cuda.h, linked with -lcuda — against the library and a vGPU
// served in this process: every device query, allocation, copy, memset,
// stream and event call succeeds, the module load answers
// CUDA_ERROR_NOT_SUPPORTED (software back end), cuGetProcAddress resolves
// by name, host memory from cuMemAllocHost round-trips, and an unsupported
// entry point (cuGraphCreate) is logged once.
func TestProbeOverSimulator(t *testing.T) {
	dir := buildLib(t)
	probe := buildProbe(t, dir)
	s := migtest.ServeNew(t, migtest.NewPool(t, 32<<20), "probe", 16<<20)
	run := func() string {
		cmd := exec.Command(probe, "3")
		cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+dir, "GMIG_CUDA_SOCKET="+s.Path)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("probe: %v\n%s", err, out)
		}
		return string(out)
	}
	out := run()
	for _, want := range []string{
		`cuda: cuDeviceGetCount\(&n\) = CUDA_ERROR_NOT_INITIALIZED`,
		`cuda: driver 12040 devices 1 name "gmig vGPU" memory 16777216 compute 5\.2 threads/block 256`,
		`cuda: cuModuleLoadData\(&m, ptx\) = CUDA_ERROR_NOT_SUPPORTED`,
		`cuda: cuGetProcAddress\(cuMemAlloc\) is cuMemAlloc_v2`,
		`cuda: cuGetProcAddress\("cuNoSuchThing".*CUDA_ERROR_NOT_FOUND`,
		`cuda: cuGraphCreate\(&g, 0\) = CUDA_ERROR_NOT_SUPPORTED`,
		`cuda: cuMemAllocHost page-aligned 1 round trip ok`,
		`cuda: cuMemcpyHtoD\(a \+ SIZE - 8, host, 16\) = CUDA_ERROR_INVALID_VALUE`,
		`cuda: iter 2 checksum [0-9a-f]{16}`,
		`cuda: digest [0-9a-f]{16}`,
		`"entry_point":"cuGraphCreate"`,
		`cuda: result ok`,
	} {
		if !regexp.MustCompile(want).MatchString(out) {
			t.Fatalf("probe's output has no %s:\n%s", want, out)
		}
	}
	if n := strings.Count(out, `"entry_point"`); n != 1 {
		t.Fatalf("%d unsupported entry points logged, want 1:\n%s", n, out)
	}
	// The same program on the same device computes the same.
	digest := regexp.MustCompile(`cuda: digest (\S+)`)
	if a, b := digest.FindString(out), digest.FindString(run()); a != b {
		t.Fatalf("two runs: %s, then %s", a, b)
	}
}

// TestProcAddressAfterDlopen loads the library as cuda-python does (dlopen,
// then cuGetProcAddress_v2 for every entry point, base name and the CUDA
// version whose signature it expects) from a C program built here: base
// names give the implemented version of that signature, per-thread names
// the same functions, a version that expects a signature the library does
// not implement CUDA_ERROR_NOT_FOUND (500) with
// CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND (1), as does an unknown name; an
// unsupported entry point gives a stub that answers
// CUDA_ERROR_NOT_SUPPORTED (801).
func TestProcAddressAfterDlopen(t *testing.T) {
	dir := buildLib(t)
	prog := filepath.Join(dir, "dlopen")
	if out, err := exec.Command("gcc", "-O2", "-o", prog, "testdata/dlopen.c", "-ldl").CombinedOutput(); err != nil {
		t.Fatalf("building testdata/dlopen.c: %v\n%s", err, out)
	}
	cmd := exec.Command(prog, "cuInit", "cuMemAlloc", "cuMemAlloc_v2", "cuMemcpyHtoDAsync_v2_ptsz",
		"cuCtxCreate@4000", "cuCtxCreate@2000", "cuCtxCreate@12050", "cuCtxGetDevice@13000", "cuCtxGetDevice_v2@13000",
		"cuEventElapsedTime@12080", "cuGetProcAddress@11030", "cuGetProcAddress@12000",
		"cuGraphCreate", "cuNoSuchThing")
	cmd.Env = append(os.Environ(), "LD_LIBRARY_PATH="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("dlopen: %v\n%s", err, out)
	}
	for _, want := range []string{
		"cuInit@12040: result 0 status 0 found 1 same-as-dlsym 1 call(1) 1\n", // CUDA_ERROR_INVALID_VALUE for flags 1
		"cuMemAlloc@12040: result 0 status 0 found 1 same-as-dlsym 0\n",       // cuMemAlloc_v2, not the legacy stub
		"cuMemAlloc_v2@12040: result 0 status 0 found 1 same-as-dlsym 1\n",
		"cuMemcpyHtoDAsync_v2_ptsz@12040: result 0 status 0 found 1",
		"cuCtxCreate@4000: result 0 status 0 found 1 same-as-dlsym 0\n",     // cuCtxCreate_v2
		"cuCtxCreate@2000: result 0 status 0 found 1 same-as-dlsym 1\n",     // the legacy stub
		"cuCtxCreate@12050: result 500 status 1 found 0",                    // _v4's CUctxCreateParams
		"cuCtxGetDevice@13000: result 0 status 0 found 1 same-as-dlsym 1\n", // one signature
		"cuCtxGetDevice_v2@13000: result 500 status 1 found 0",              // CUDA 13's, which takes a context
		"cuEventElapsedTime@12080: result 0 status 0 found 1 same-as-dlsym 1\n",
		"cuGetProcAddress@11030: result 0 status 0 found 1 same-as-dlsym 1\n",
		"cuGetProcAddress@12000: result 0 status 0 found 1 same-as-dlsym 0\n", // cuGetProcAddress_v2
		"cuGraphCreate@12040: result 0 status 0 found 1 same-as-dlsym 1 call 801\n",
		"cuNoSuchThing@12040: result 500 status 1 found 0",
	} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("no %q in:\n%s", want, out)
		}
	}
	if !strings.Contains(string(out), `"entry_point":"cuGraphCreate"`) {
		t.Fatalf("the unsupported call was not logged:\n%s", out)
	}
}
