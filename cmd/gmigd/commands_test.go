package main

import (
	"context"
	"io"
	"os"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/precopy"
)

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
