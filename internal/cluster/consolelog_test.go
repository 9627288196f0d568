package cluster

import (
	"bytes"
	"strings"
	"testing"

	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/hostd/qemu"
)

// TestJoinConsoles: a migrated VM's two console logs give its serial
// output, without gmigd's marker lines, a line the guest began on the
// source and ended on the destination whole, without "\r".
func TestJoinConsoles(t *testing.T) {
	src := hostd.ConsoleMarker + " VM vm: QEMU started\nboot\r\ngmig: x: it"
	dst := hostd.ConsoleMarker + " VM vm: QEMU waiting for an incoming migration\ner 1\r\ndone\r\n"
	got := strings.Join(JoinConsoles([]byte(src), []byte(dst)), "|")
	if want := "boot|gmig: x: iter 1|done|"; got != want {
		t.Fatalf("JoinConsoles: %q, want %q", got, want)
	}
}

// TestJoinConsolesDropsQEMULines: QEMU's stderr lines in the console logs
// are not the guest's output, wherever they land — first on the
// destination while the guest's line that the migration cut is still open
// (what CI saw: the destination QEMU's warning about error recovery glued
// to a digest), or in the middle of a guest line on one host. Each is
// written through the console writer QEMU's stderr really goes through.
func TestJoinConsolesDropsQEMULines(t *testing.T) {
	var src, dst bytes.Buffer
	src.WriteString(hostd.ConsoleMarker + " VM vm: QEMU started\nboot\r\ngmig: x: it")
	dst.WriteString(hostd.ConsoleMarker + " VM vm: QEMU waiting for an incoming migration\n")
	qemu.ConsoleStderr(&dst).Write([]byte("qemu-system-x86_64: -device {...}: warning: Could not enable error recovery for the device\n"))
	dst.WriteString("er 1\r\ngmig: x: ha")
	w := qemu.ConsoleStderr(&dst)
	w.Write([]byte("qemu-system-x86_64: a line in two"))
	w.Write([]byte(" writes\nqemu-system-x86_64: another\n"))
	dst.WriteString("lf\r\ndone\r\n")
	got := strings.Join(JoinConsoles(src.Bytes(), dst.Bytes()), "|")
	if want := "boot|gmig: x: iter 1|gmig: x: half|done|"; got != want {
		t.Fatalf("JoinConsoles: %q, want %q\nthe destination's log:\n%s", got, want, dst.Bytes())
	}
	if c := strings.Count(dst.String(), qemu.StderrPrefix); c != 3 {
		t.Errorf("%d lines of QEMU's in the log, want 3:\n%s", c, dst.Bytes())
	}
}
