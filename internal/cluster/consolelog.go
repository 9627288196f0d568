package cluster

import (
	"bytes"
	"strings"

	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/hostd/qemu"
)

// JoinConsoles returns a VM's serial output as lines from the console
// logs of the hosts it ran on, in the order it ran there: each log without
// gmigd's own marker lines (hostd.ConsoleMarker) and QEMU's stderr lines
// (qemu.StderrPrefix), joined, so that a line the migration cut in two is
// whole again. Both kinds of line are written whole, in one write, but may
// land in the middle of a line of the guest's: each is cut from its prefix
// to its newline, wherever in a line it begins. Lines come without their
// line ending (a serial console ends them with "\r\n"); the last is what
// followed the last line ending ("" when the output ended with one).
func JoinConsoles(logs ...[]byte) []string {
	var all bytes.Buffer
	for _, l := range logs {
		for _, seg := range bytes.SplitAfter(l, []byte("\n")) {
			all.Write(guestPart(seg))
		}
	}
	lines := strings.Split(all.String(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, "\r")
	}
	return lines
}

// hostPrefixes begin the lines in a console log that are not the guest's.
var hostPrefixes = [][]byte{[]byte(hostd.ConsoleMarker), []byte(qemu.StderrPrefix)}

// guestPart is what of seg, a console log's line with its newline, the
// guest wrote: seg up to the first host line begun in it (which runs to
// the newline), or seg whole.
func guestPart(seg []byte) []byte {
	cut := len(seg)
	for _, p := range hostPrefixes {
		if i := bytes.Index(seg, p); i >= 0 && i < cut {
			cut = i
		}
	}
	return seg[:cut]
}
