package qemu

import (
	"bufio"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestMonitorInputCost measures where a port access's time goes in QEMU's
// monitors: the same read ("i /w 0xcf8", its answer checked) as QMP
// commands one at a time on the main monitor, as a QMP batch on the batch
// monitor, as QMP batches padded with blanks (QEMU reads monitor input
// one byte per pass of its I/O loop: the cost follows the bytes), and as
// lines on a readline HMP monitor, where a command is 11 bytes instead of
// about 80. It logs the best of 10 runs of 20 accesses each way. It needs
// the provisioned QEMU root (GMIG_CACHE).
func TestMonitorInputCost(t *testing.T) {
	root := needRoot(t)
	run := filepath.Join(t.TempDir(), "run")
	if err := os.Mkdir(run, 0o700); err != nil {
		t.Fatal(err)
	}
	hmpSock := filepath.Join(run, "hmp.sock")
	out := &syncBuffer{}
	vm, err := Start(t.Context(), Config{Spec: Spec{Accel: "tcg", MemoryMB: 64, Extra: []string{
		"-chardev", "socket,id=hmp,path=" + hmpSock + ",server=on,wait=off", "-mon", "chardev=hmp,mode=readline"}},
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
	m, err := dialBatchMonitor(filepath.Join(run, BatchSocket), batchTimeout)
	if err != nil {
		t.Fatal(err)
	}
	defer m.close()
	batch := func(pad int) time.Duration {
		return best(func() {
			cmds := make([]batchCommand, n)
			for i := range cmds {
				cmds[i] = batchCommand{Execute: "human-monitor-command", Arguments: map[string]string{"command-line": line + strings.Repeat(" ", pad)}}
			}
			raw, err := m.run(cmds)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range raw {
				var answer string
				if err := json.Unmarshal(r, &answer); err != nil {
					t.Fatal(err)
				}
				check("batch monitor", answer)
			}
		})
	}
	batched, padded := batch(0), batch(100)

	c, err := net.Dial("unix", hmpSock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	// untilPrompt reads one command's echo and answer, up to the prompt.
	untilPrompt := func() string {
		var b strings.Builder
		for !strings.HasSuffix(b.String(), "(qemu) ") {
			ch, err := r.ReadByte()
			if err != nil {
				t.Fatal(err)
			}
			b.WriteByte(ch)
		}
		return b.String()
	}
	untilPrompt() // the banner
	readline := best(func() {
		if _, err := c.Write([]byte(strings.Repeat(line+"\n", n))); err != nil {
			t.Fatal(err)
		}
		for range n {
			// The echo ends with its own line; the answer follows.
			_, answer, _ := strings.Cut(strings.TrimSuffix(untilPrompt(), "(qemu) "), "\r\n")
			check("HMP monitor", answer)
		}
	})
	t.Logf("per port access, best of %d runs of %d: QMP main monitor %v, QMP batch %v, QMP batch +100 bytes %v, readline HMP batch %v",
		runs, n, serial, batched, padded, readline)
}
