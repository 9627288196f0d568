package hostd

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestConsoleKeptOnReturn: a VM's console log is appended to, each QEMU's
// part after a marker line, so a VM that comes back to a host keeps what
// its earlier QEMU there wrote.
func TestConsoleKeptOnReturn(t *testing.T) {
	dir := t.TempDir()
	for i, incoming := range []bool{false, true} {
		con, err := openConsole(dir, "vm", incoming)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := con.WriteString("guest line " + string(rune('A'+i)) + "\n"); err != nil {
			t.Fatal(err)
		}
		con.Close()
	}
	b, err := os.ReadFile(filepath.Join(dir, "console.log"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) != 4 {
		t.Fatalf("console %q: want 4 lines", b)
	}
	for i, want := range []string{ConsoleMarker + " VM vm: QEMU started at ", "guest line A", ConsoleMarker + " VM vm: QEMU waiting for an incoming migration at ", "guest line B"} {
		if !strings.HasPrefix(lines[i], want) {
			t.Errorf("line %d %q, want %q...", i, lines[i], want)
		}
	}
}
