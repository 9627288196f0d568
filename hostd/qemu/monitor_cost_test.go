package qemu

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestMonitorInputCost measures where a port access's time goes in QEMU's
// monitors: the same read ("i /w 0xcf8", its answer checked) as QMP
// human-monitor-commands one at a time on the main monitor (about 80
// bytes each), as lines on the readline HMP monitor one round trip at a
// time and as one batch (11 bytes each), and as a batch of lines padded
// with 64 blanks (QEMU reads monitor input one byte per pass of its I/O
// loop: the cost follows the bytes, not the round trips). It logs the
// best of 10 runs of 20 accesses each way. It needs the provisioned QEMU
// root (GMIG_CACHE).
func TestMonitorInputCost(t *testing.T) {
	root := needRoot(t)
	run := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(run, 0o700); err != nil {
		t.Fatal(err)
	}
	out := &syncBuffer{}
	vm, err := Start(t.Context(), Config{Spec: Spec{Accel: "tcg", MemoryMB: 64},
		Root: root, RunDir: run, Serial: out, Incoming: true})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(vm.Kill)
	const n, runs, line = 20, 10, "i /w 0xcf8"
	const want = "portl[0x0cf8] = 0x80000000"
	hmp(t, vm, "o /w 0xcf8 0x80000000")
	best := func(f func()) time.Duration {
		b := time.Hour
		for range runs {
			start := time.Now()
			f()
			b = min(b, time.Since(start))
		}
		return b / n
	}
	check := func(how, got string) {
		if strings.TrimSpace(got) != want {
			t.Fatalf("%s: answer %q, want %q", how, got, want)
		}
	}

	serial := best(func() {
		for range n {
			check("main monitor", hmp(t, vm, line))
		}
	})
	m, err := dialHMPMonitor(filepath.Join(run, HMPSocket), hmpTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	batch := func(l string, per int) time.Duration {
		return best(func() {
			for range n / per {
				outs, err := m.run(slices.Repeat([]string{l}, per))
				if err != nil {
					t.Fatal(err)
				}
				for _, o := range outs {
					check("HMP monitor", o)
				}
			}
		})
	}
	oneByOne, batched, padded := batch(line, 1), batch(line, n), batch(line+strings.Repeat(" ", 64), n)
	t.Logf("per port access, best of %d runs of %d: QMP main monitor %v, readline HMP one at a time %v, readline HMP batch %v, readline HMP batch +64 bytes %v",
		runs, n, serial, oneByOne, batched, padded)
}
