package qemu

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestLastLines(t *testing.T) {
	var l lastLines
	for i := range 30 {
		fmt.Fprintf(&l, "line %d\r\n", i)
	}
	l.Write([]byte("\n" + strings.Repeat("x", 3*maxStderrLine) + "\nunfinished"))
	got := l.Lines()
	if len(got) != keptStderrLines {
		t.Fatalf("%d lines kept, want %d: %q", len(got), keptStderrLines, got)
	}
	if got[0] != "line 12" || got[17] != "line 29" {
		t.Errorf("kept %q ... %q, want line 12 ... line 29", got[0], got[17])
	}
	if len(got[18]) != maxStderrLine {
		t.Errorf("a long line kept %d bytes, want %d", len(got[18]), maxStderrLine)
	}
	if got[19] != "unfinished" {
		t.Errorf("last line %q, want the unfinished one", got[19])
	}
}

// fakeRoot is a QEMU root whose "loader" is script: Start runs it in
// QEMU's place.
func fakeRoot(t *testing.T, script string) Root {
	t.Helper()
	dir := t.TempDir()
	for _, p := range []string{loaderPath, qemuPath} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, qemuPath), nil, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, loaderPath), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return Root(dir)
}

// TestStartSaysWhyQEMUExited: a QEMU that ends before its monitor is up
// fails Start with its exit status and its last stderr lines (the guest's
// console, on stdout, is not quoted); the console gets both streams.
func TestStartSaysWhyQEMUExited(t *testing.T) {
	root := fakeRoot(t, `echo "guest console line"
i=0; while [ $i -lt 25 ]; do echo "qemu-system-x86_64: warning $i" >&2; i=$((i+1)); done
echo "qemu-system-x86_64: could not load PC BIOS 'bios-256k.bin'" >&2
printf "qemu-system-x86_64: no newline" >&2
exit 1
`)
	dir := t.TempDir()
	console, err := os.Create(filepath.Join(dir, "console.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer console.Close()
	_, err = Start(context.Background(), Config{Spec: Spec{Accel: "tcg"}, Root: root, RunDir: dir, Serial: console})
	t.Log(err)
	if !errors.Is(err, ErrExitedEarly) {
		t.Fatalf("Start: %v, want ErrExitedEarly", err)
	}
	for _, want := range []string{"exit status 1", "could not load PC BIOS 'bios-256k.bin'", "warning 24", "warning 7", "no newline"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	for _, not := range []string{"warning 6 ", "guest console line"} {
		if strings.Contains(err.Error()+" ", not) {
			t.Errorf("error %q quotes %q", err, not)
		}
	}
	b, _ := os.ReadFile(console.Name())
	c := string(b)
	if !strings.Contains(c, "guest console line\n") {
		t.Errorf("console %q lacks QEMU's stdout", c)
	}
	for _, want := range []string{"could not load PC BIOS 'bios-256k.bin'", "warning 0", "no newline"} {
		if !strings.Contains(c, StderrPrefix+"qemu-system-x86_64: "+want+"\n") {
			t.Errorf("console %q lacks QEMU's stderr line %q as a line of its own behind %q", c, want, StderrPrefix)
		}
	}
}
