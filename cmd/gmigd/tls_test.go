package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/internal/mtls"
	"github.com/gmig-dev/gmig/orchestrator"
)

// TestCertsCommand: gmigd certs makes a CA and a certificate per host with
// the right modes; the files load as a migration transport; a second run
// keeps the CA.
func TestCertsCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "pki")
	run := func() {
		t.Helper()
		captureStdout(t, func() error {
			return cmdCerts([]string{"-out", dir, "-hosts", "a,b=10.0.0.12+b.example", "-days", "2"})
		})
	}
	run()
	ca, _ := os.ReadFile(filepath.Join(dir, "ca.pem"))
	for name, mode := range map[string]os.FileMode{"ca.pem": 0o644, "ca.key": 0o600, "a.pem": 0o644, "a.key": 0o600, "b.pem": 0o644, "b.key": 0o600} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode {
			t.Errorf("%s: mode %v, want %v", name, fi.Mode().Perm(), mode)
		}
	}
	tr, err := mtls.Load(mtls.HostFiles(dir, "b"), mtls.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(tr.Leaf().DNSNames, " "); got != "b b.example localhost" || len(tr.Leaf().IPAddresses) != 3 {
		t.Fatalf("b's names: %s %v", got, tr.Leaf().IPAddresses)
	}
	run()
	if again, _ := os.ReadFile(filepath.Join(dir, "ca.pem")); !bytes.Equal(ca, again) {
		t.Fatal("a second run made a new CA")
	}
	for _, args := range [][]string{{"-out", dir}, {"-hosts", "a"}, {"-out", dir, "-hosts", "../x"}} {
		if err := cmdCerts(args); err == nil {
			t.Errorf("certs %v: no error", args)
		}
	}
}

// TestMigrationTLSFlags: -migrate-listen needs certificates or an explicit
// -insecure-migrations, which warns once; without a listener and without
// either, migrations are refused with the reason; the flags go together.
func TestMigrationTLSFlags(t *testing.T) {
	dir := t.TempDir()
	captureStdout(t, func() error { return cmdCerts([]string{"-out", dir, "-hosts", "a"}) })
	f := mtls.HostFiles(dir, "a")
	full := migrationTLS{cert: f.Cert, key: f.Key, ca: f.CA}
	for _, c := range []struct {
		name      string
		flags     migrationTLS
		listening bool
		want      string // the transport's type, or "error"
	}{
		{"listener without certificates", migrationTLS{}, true, "error"},
		{"listener with certificates", full, true, "*mtls.Transport"},
		{"listener, insecure", migrationTLS{insecure: true}, true, "orchestrator.TCP"},
		{"no listener, no certificates", migrationTLS{}, false, "main.noMigrations"},
		{"no listener, certificates", full, false, "*mtls.Transport"},
		{"insecure and certificates", migrationTLS{cert: f.Cert, key: f.Key, ca: f.CA, insecure: true}, true, "error"},
		{"a certificate without a key", migrationTLS{cert: f.Cert, ca: f.CA}, true, "error"},
		{"a bundle without certificates", migrationTLS{cert: f.Cert, key: f.Key, ca: f.Key}, true, "error"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var log bytes.Buffer
			tr, err := c.flags.transport(zerolog.New(&log), c.listening)
			got := "error"
			if err == nil {
				got = typeName(tr)
			}
			if got != c.want {
				t.Fatalf("transport %s (%v), want %s", got, err, c.want)
			}
			if c.flags.insecure && err == nil && strings.Count(log.String(), "neither authenticated nor encrypted") != 1 {
				t.Fatalf("insecure without its one warning:\n%s", log.String())
			}
			if err == nil && c.want == "main.noMigrations" {
				if _, err := tr.Dial(context.Background(), "127.0.0.1:1"); !errors.Is(err, errNoMigrations) {
					t.Fatalf("dialling without certificates: %v", err)
				}
			}
		})
	}
}

func typeName(t orchestrator.Transport) string {
	switch t.(type) {
	case *mtls.Transport:
		return "*mtls.Transport"
	case orchestrator.TCP:
		return "orchestrator.TCP"
	case noMigrations:
		return "main.noMigrations"
	}
	return "?"
}
