package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/precopy"
)

// TestBenchSmall runs `gmig-bench` small: the mix and a paced render loop
// migrate with every strategy and must end with the reference digest
// (bench returns an error otherwise); the tables, results.json,
// results.md and the plots are written.
func TestBenchSmall(t *testing.T) {
	var out, status bytes.Buffer
	render, _ := parseProfile("render:rate=20:fps=100")
	c := benchConfig{
		out: &out, status: &status, inproc: true, mem: 4 << 20, wmem: 1 << 20, fill: 0.5, steps: 40, seed: 3, runs: 1,
		profiles: []benchProfile{{}, {w: render}}, strategies: precopy.Strategies, log: zerolog.Nop(),
		warmup: 50 * time.Millisecond, hold: 200 * time.Millisecond, outDir: t.TempDir(), compareSerial: true,
		overhead: 400 * time.Millisecond, overheadProfile: render, overheadMem: 4 << 20, overheadBgRate: 1000,
	}
	if err := c.run(context.Background()); err != nil {
		t.Fatalf("%v\n%s", err, status.String())
	}
	s := status.String()
	if n, want := strings.Count(s, "digest ok"), 2*(len(precopy.Strategies)+2); n != want {
		t.Fatalf("%d runs ended with the reference digest, want %d:\n%s", n, want, s)
	}
	for _, want := range []string{"Ratios against stopcopy", "serial (scan everything", "Steady-state cost of dirty tracking"} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("no %q table:\n%s", want, out.String())
		}
	}
	for _, f := range []string{"results.json", "results.md", "downtime-terms.png", "pages-in-downtime.png"} {
		if _, err := os.Stat(filepath.Join(c.outDir, f)); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// TestCommandLineRelative: the recorded command names no absolute path
// (results.json and results.md are committed), whether a path is its own
// argument or a flag's value, and keeps every other argument as given.
func TestCommandLineRelative(t *testing.T) {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	got := commandLine([]string{"/usr/local/bin/gmig-bench", "-mem", "1G", "-out", filepath.Join(wd, "results", "a1"),
		"-cpuprofile=" + filepath.Join(wd, "cpu.prof"), "-profiles", "render:rate=300", "-mem-profile", ""})
	want := "gmig-bench -mem 1G -out " + filepath.Join("results", "a1") + ` -cpuprofile=cpu.prof -profiles render:rate=300 -mem-profile ""`
	if got != want {
		t.Fatalf("command line %q, want %q", got, want)
	}
}
