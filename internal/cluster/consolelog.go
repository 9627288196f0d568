package cluster

import (
	"bytes"
	"strings"

	"github.com/gmig-dev/gmig/hostd"
)

// JoinConsoles returns a VM's serial output as lines from the console
// logs of the hosts it ran on, in the order it ran there: each log without
// gmigd's own marker lines (hostd.ConsoleMarker), joined, so that a line
// the migration cut in two is whole again. Lines come without their line
// ending (a serial console ends them with "\r\n"); the last is what
// followed the last line ending ("" when the output ended with one).
func JoinConsoles(logs ...[]byte) []string {
	var all bytes.Buffer
	for _, l := range logs {
		for _, seg := range bytes.SplitAfter(l, []byte("\n")) {
			if !bytes.HasPrefix(seg, []byte(hostd.ConsoleMarker)) {
				all.Write(seg)
			}
		}
	}
	lines := strings.Split(all.String(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, "\r")
	}
	return lines
}
