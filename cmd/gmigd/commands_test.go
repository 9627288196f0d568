package main

import (
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/precopy"
)

// TestBenchSmall runs `gmigd bench` small: the mix and a paced render loop
// migrate with every strategy and must end with the reference digest
// (bench returns an error otherwise); the tables, results.json,
// results.md and the plots are written.
func TestBenchSmall(t *testing.T) {
	var out, status bytes.Buffer
	render, _ := parseProfile("render:rate=20:fps=100")
	c := benchConfig{
		out: &out, status: &status, inproc: true, mem: 4 << 20, wmem: 1 << 20, fill: 0.5, steps: 40, seed: 3, runs: 1,
		profiles: []guest.WorkloadConfig{{}, render}, strategies: precopy.Strategies, log: zerolog.Nop(),
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

// TestDemoSmall runs `gmigd demo` small: the suite passes, the migration
// happens under the workload, and the digest check is done (run returns an
// error on a mismatch).
func TestDemoSmall(t *testing.T) {
	d := demo{mem: 4 << 20, wmem: 1 << 20, steps: 60, at: 20, seed: 2, strategy: precopy.OneShot, suite: true, log: zerolog.Nop()}
	out := captureStdout(t, func() error { return d.run(context.Background()) })
	for _, want := range []string{"23 passed, 0 failed", "live migration A -> B", "downtime (pause -> resume", "guest-observed downtime", "equals a never-migrated run"} {
		if !strings.Contains(out, want) {
			t.Fatalf("demo output lacks %q:\n%s", want, out)
		}
	}
}

// captureStdout runs f with os.Stdout redirected and returns what it wrote.
func captureStdout(t *testing.T, f func() error) string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stdout
	os.Stdout = w
	done := make(chan string)
	go func() {
		b, _ := io.ReadAll(r)
		done <- string(b)
	}()
	ferr := f()
	os.Stdout = old
	w.Close()
	out := <-done
	if ferr != nil {
		t.Fatalf("%v\n%s", ferr, out)
	}
	return out
}
