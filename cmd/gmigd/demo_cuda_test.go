package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/engine/nvidia"
	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/precopy"
)

// TestProgramOutputAcrossHosts: the program's lines come from the source's
// console then the destination's, gmigd's marker lines left out, a line
// the migration cut in two made whole, gmig-guest's own lines before the
// program and its exit line not among them.
func TestProgramOutputAcrossHosts(t *testing.T) {
	a := hostd.ConsoleMarker + " VM demo: QEMU started at T\n" +
		"Linux booting\r\ngmig: cuda: running /usr/bin/cuda-streams 3 0\r\n" +
		"gmig: iter 0 digest 1\r\ngmig: time: 1.5 ms\r\ngmig: it"
	b := hostd.ConsoleMarker + " VM demo: QEMU waiting for an incoming migration at T\n" +
		"er 1 digest 2\r\ngmig: iter 2 digest 3\r\ngmig: cuda exit 0\r\ngmig: result ok\r\n"
	lines, exit := programOutput([]byte(a), []byte(b))
	want := []string{"iter 0 digest 1", "time: 1.5 ms", "iter 1 digest 2", "iter 2 digest 3"}
	if !slices.Equal(lines, want) || exit != "0" {
		t.Fatalf("got %q exit %s, want %q exit 0", lines, exit, want)
	}
	if got := compareOutputs(lines, []string{"iter 0 digest 1", "iter 1 digest 2", "time: 9 ms", "iter 2 digest 3",
		`{"level":"warn","lib":"libcuda","time":"2026-11-25T15:47:34Z","message":"cudadrv: call failed"}`}); got != "identical" {
		t.Fatalf("time or library log lines compared: %s", got)
	}
	if got := compareOutputs(lines, []string{"iter 0 digest 1", "iter 1 digest 9", "iter 2 digest 3"}); !strings.Contains(got, "line 2") {
		t.Fatalf("a different line: %s", got)
	}
	if _, exit := programOutput([]byte(a)); exit != "?" {
		t.Fatalf("a console that ends before the program: exit %s", exit)
	}
}

// TestDemoCUDAProgram runs `gmigd demo -cuda-program` under QEMU (TCG
// here) on a host with a GPU (the CUDA model, GMIG_CUDA_MODEL=1, which
// both daemons see): on the software back end with device-local memory,
// and on the cuda back end (both daemons on the one GPU; without guest
// modules, whose refusal the probe checks). The guest's CUDA probe migrated mid-run has the output of a run
// never migrated; the report and the program's lines are printed. It needs
// the provisioned QEMU root and guest image (GMIG_CACHE).
func TestDemoCUDAProgram(t *testing.T) {
	cache := os.Getenv("GMIG_CACHE")
	if cache == "" {
		t.Skip("skipping: GMIG_CACHE unset (the provisioned QEMU root and guest image)")
	}
	if _, err := os.Stat(filepath.Join(cache, "guest", "initramfs.cpio")); err != nil {
		t.Skipf("skipping: %v", err)
	}
	t.Setenv(nvidia.ModelEnv, "1")
	bin := filepath.Join(t.TempDir(), "gmigd")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("building gmigd: %v\n%s", err, out)
	}
	for _, c := range []struct {
		backend  string
		modules  bool
		localMem uint64
		vgpu     string
	}{
		{"software", false, 4 << 20, "its vGPU there has the software back end, 16 MiB graphics memory and 4 MiB local memory"},
		{"cuda", false, 0, "its vGPU there has the cuda back end, 16 MiB graphics memory and 0 MiB local memory"},
	} {
		t.Run(c.backend, func(t *testing.T) {
			q := qemuDemo{
				demo:  demo{mem: 16 << 20, strategy: precopy.OneShot, log: zerolog.Nop()},
				cache: cache, machine: "pc", cpus: 2, ramMB: 512, accel: "auto", binary: bin,
				backend: c.backend, guestModules: c.modules, localMem: c.localMem,
				program: "/usr/bin/cuda-probe,80,100", programLines: 8,
			}
			if c.backend == "software" {
				// A program that ends before -program-lines lines is an
				// error, not a wait for lines that never come.
				early := q
				early.program, early.programLines = "/usr/bin/cuda-probe,1,0", 100
				if err := early.run(context.Background()); !errors.Is(err, errProgramEnded) {
					t.Fatalf("a program that ends first: %v", err)
				}
			}
			out := captureStdout(t, func() error { return q.run(context.Background()) })
			for _, want := range []string{
				c.vgpu,
				"downtime (pause -> resume",
				"guest-observed downtime",
				"  | cuda: digest ",
				"never migrated (time: lines and the library's log left out): identical",
			} {
				if !strings.Contains(out, want) {
					t.Fatalf("demo output lacks %q:\n%s", want, out)
				}
			}
		})
	}
}
