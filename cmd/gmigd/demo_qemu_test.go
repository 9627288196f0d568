package main

import (
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDemoGuestImage: the guest's initramfs is the cache's unless -initrd
// names another, which must exist; a missing image is an error naming it.
func TestDemoGuestImage(t *testing.T) {
	cache := t.TempDir()
	guestDir := filepath.Join(cache, "guest")
	if err := os.MkdirAll(guestDir, 0o755); err != nil {
		t.Fatal(err)
	}
	q := qemuDemo{cache: cache}
	if _, _, err := q.guestImage(); err == nil || !strings.Contains(err.Error(), "vmlinuz") {
		t.Fatalf("no kernel: %v", err)
	}
	for _, f := range []string{"vmlinuz", "initramfs.cpio"} {
		if err := os.WriteFile(filepath.Join(guestDir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	kernel, initrd, err := q.guestImage()
	if err != nil || kernel != filepath.Join(guestDir, "vmlinuz") || initrd != filepath.Join(guestDir, "initramfs.cpio") {
		t.Fatalf("the cache's image: %s %s %v", kernel, initrd, err)
	}
	q.initrd = filepath.Join(t.TempDir(), "layered.cpio")
	if _, _, err := q.guestImage(); err == nil || !strings.Contains(err.Error(), "-initrd") {
		t.Fatalf("a missing -initrd: %v", err)
	}
	if err := os.WriteFile(q.initrd, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, initrd, err = q.guestImage(); err != nil || initrd != q.initrd {
		t.Fatalf("-initrd: %s %v", initrd, err)
	}
}

// TestDemoStreamsFlag: the demo's -streams is refused out of range before
// anything starts.
func TestDemoStreamsFlag(t *testing.T) {
	var q qemuDemo
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	q.flags(fs)
	if err := fs.Parse([]string{"-streams", "1000", "-cache", t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	if err := q.run(context.Background()); err == nil || !strings.Contains(err.Error(), "-streams 1000") {
		t.Fatalf("-streams 1000: %v, want the flag refused", err)
	}
}
