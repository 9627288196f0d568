package cluster

import (
	"strings"
	"testing"

	"github.com/gmig-dev/gmig/hostd"
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
