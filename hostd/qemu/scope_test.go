package qemu

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestUseScopes: scopes only for a root service of a systemd-booted host.
func TestUseScopes(t *testing.T) {
	for _, c := range []struct {
		booted, service bool
		euid            int
		want            bool
	}{
		{true, true, 0, true},
		{false, true, 0, false}, // no systemd as init (containers, CI)
		{true, false, 0, false}, // run by hand
		{true, true, 1000, false},
	} {
		if got := useScopes(c.booted, c.service, c.euid); got != c.want {
			t.Errorf("useScopes(%v, %v, %d) = %v", c.booted, c.service, c.euid, got)
		}
	}
	if _, err := os.Stat(systemdBootedDir); err != nil && UseScopes() {
		t.Fatal("UseScopes without systemd")
	}
}

// TestScopeUnit: a valid unit name with the prefix and the VM's name,
// different each time.
func TestScopeUnit(t *testing.T) {
	a, b := ScopeUnit("vm-1"), ScopeUnit("vm-1")
	if !regexp.MustCompile(`^gmig-qemu-vm-1-[0-9a-f]{8}\.scope$`).MatchString(a) || a == b {
		t.Fatalf("scope units %q, %q", a, b)
	}
}

// TestScoped: without a unit the command is unchanged; with one it runs
// through systemd-run --scope with that unit in machine.slice, QEMU's
// environment, process group and output kept, and (systemd-run execs in
// place: a stand-in here does the same) the process gmigd waits for is
// the command itself.
func TestScoped(t *testing.T) {
	cmd := exec.Command("/bin/sh", "-c", "echo $$")
	if got, err := scoped(cmd, ""); err != nil || got != cmd {
		t.Fatalf("without a unit: %v, %v", got, err)
	}
	dir := t.TempDir()
	argsFile := filepath.Join(dir, "args")
	stand := "#!/bin/sh\nprintf '%s\\n' \"$@\" > " + argsFile + "\nwhile [ \"$1\" != -- ]; do shift; done\nshift\nexec \"$@\"\n"
	if err := os.WriteFile(filepath.Join(dir, "systemd-run"), []byte(stand), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", dir+":"+os.Getenv("PATH"))
	var out strings.Builder
	cmd = exec.Command("/bin/sh", "-c", "echo $$ $GMIG_SCOPE_TEST")
	cmd.Env = append(os.Environ(), "GMIG_SCOPE_TEST=kept")
	cmd.Stdout = &out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	w, err := scoped(cmd, "gmig-qemu-vm-0123abcd.scope")
	if err != nil {
		t.Fatal(err)
	}
	if w.SysProcAttr != cmd.SysProcAttr {
		t.Fatal("process attributes lost")
	}
	if err := w.Run(); err != nil {
		t.Fatal(err)
	}
	args, _ := os.ReadFile(argsFile)
	want := "--scope\n--quiet\n--collect\n--unit=gmig-qemu-vm-0123abcd.scope\n--slice=machine.slice\n" +
		"--description=gmig VM QEMU (started by gmigd)\n--\n/bin/sh\n-c\necho $$ $GMIG_SCOPE_TEST\n"
	if string(args) != want {
		t.Fatalf("systemd-run got\n%s\nwant\n%s", args, want)
	}
	if got := strings.TrimSpace(out.String()); got != strconv.Itoa(w.Process.Pid)+" kept" {
		t.Fatalf("the command printed %q; its pid should be the one started (%d) and its environment kept", got, w.Process.Pid)
	}
	t.Setenv("PATH", t.TempDir())
	if _, err := scoped(exec.Command("/bin/true"), "u.scope"); err == nil {
		t.Fatal("no systemd-run, no error")
	}
}
