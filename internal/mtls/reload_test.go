package mtls

import (
	"context"
	"crypto/tls"
	"errors"
	"os"
	"testing"
	"time"
)

// TestReload: after Reload, a listener opened before it presents the new
// certificate and Dial uses it too; a reload of unusable files fails with
// ErrConfig and leaves the transport presenting the certificate it had.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	ca, err := EnsureCA(dir, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f, err := ca.WriteHost(dir, Host{Name: "a"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	server, err := Load(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	cf, err := ca.WriteHost(dir, Host{Name: "b"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	client, err := Load(cf, Options{})
	if err != nil {
		t.Fatal(err)
	}
	l, err := server.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() { // take what the listener hands out
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	presented := func() string {
		t.Helper()
		c, err := client.Dial(context.Background(), l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.(*tls.Conn).ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	first := presented()
	if first != server.Leaf().SerialNumber.String() {
		t.Fatalf("presented %s, Leaf %s", first, server.Leaf().SerialNumber)
	}

	if _, err := ca.WriteHost(dir, Host{Name: "a"}, time.Hour); err != nil { // a renewed certificate
		t.Fatal(err)
	}
	if err := server.Reload(f); err != nil {
		t.Fatal(err)
	}
	second := presented()
	if second == first || second != server.Leaf().SerialNumber.String() {
		t.Fatalf("after Reload the listener presented %s (before: %s, Leaf: %s)", second, first, server.Leaf().SerialNumber)
	}

	if err := os.WriteFile(f.Cert, []byte("not a certificate\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := server.Reload(f); !errors.Is(err, ErrConfig) {
		t.Fatalf("reloading a broken certificate: %v, want ErrConfig", err)
	}
	if got := presented(); got != second {
		t.Fatalf("after a failed Reload the listener presented %s, want the kept %s", got, second)
	}
}
