package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/orchestrator"
)

// TestProgressPrinter: JSON lines carry every snapshot; a terminal gets
// one line rewritten in place; a pipe gets a line per phase.
func TestProgressPrinter(t *testing.T) {
	snaps := []orchestrator.Progress{
		{Phase: orchestrator.PhaseVGPULive, Elapsed: time.Second, Pages: 10, TotalPages: 100, Bytes: 40960, Rate: 1 << 20},
		{Phase: orchestrator.PhaseVGPULive, Elapsed: 2 * time.Second, Pages: 100, TotalPages: 100, Bytes: 409600},
		{Phase: orchestrator.PhaseVMMLive, Elapsed: 3 * time.Second, Pages: 100, TotalPages: 100,
			VMM: orchestrator.VMMProgress{Status: "active", Transferred: 64 << 20, Remaining: 32 << 20, Total: 512 << 20}},
	}
	var js, tty, pipe bytes.Buffer
	for _, p := range []*progressPrinter{newProgressPrinter(&js, true, false), newProgressPrinter(&tty, false, true), newProgressPrinter(&pipe, false, false)} {
		for _, s := range snaps {
			p.show(s)
		}
		p.done()
	}
	lines := strings.Split(strings.TrimSpace(js.String()), "\n")
	if len(lines) != len(snaps) {
		t.Fatalf("%d JSON lines for %d snapshots", len(lines), len(snaps))
	}
	var got struct{ Progress orchestrator.Progress }
	if err := json.Unmarshal([]byte(lines[2]), &got); err != nil || got.Progress.VMM.Remaining != 32<<20 {
		t.Fatalf("JSON line %q: %+v, %v", lines[2], got, err)
	}
	if n := strings.Count(tty.String(), "\r\033[K"); n != len(snaps) || strings.Count(tty.String(), "\n") != 1 {
		t.Fatalf("terminal output %q: want %d in-place rewrites and one final newline", tty.String(), len(snaps))
	}
	if !strings.Contains(tty.String(), "RAM active: 64/512 MiB sent, 32 MiB left") || !strings.Contains(tty.String(), "[##") {
		t.Fatalf("terminal line lacks the bar or QEMU's RAM: %q", tty.String())
	}
	if n := strings.Count(pipe.String(), "\n"); n != 2 {
		t.Fatalf("pipe output %q: want a line per phase (2)", pipe.String())
	}
}
