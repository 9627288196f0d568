package mtls

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"testing"
	"time"
)

// TestPEM: a loaded transport gives its certificate, its key as PKCS#8
// (also when the key file was SEC 1) and the CA bundle as read; after a
// Reload, the new ones; a transport made by New has no bundle to give.
func TestPEM(t *testing.T) {
	dir := t.TempDir()
	ca, err := EnsureCA(dir, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	f, err := ca.WriteHost(dir, Host{Name: "a"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	// The key file as SEC 1 ("EC PRIVATE KEY"), as openssl ecparam writes it.
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	sec1, err := x509.MarshalECPrivateKey(pair.PrivateKey.(*ecdsa.PrivateKey))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.Key, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: sec1}), 0o600); err != nil {
		t.Fatal(err)
	}
	tr, err := Load(f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	checkPEM := func(f Files) {
		t.Helper()
		p, err := tr.PEM()
		if err != nil {
			t.Fatal(err)
		}
		wantCert, _ := os.ReadFile(f.Cert)
		wantCA, _ := os.ReadFile(f.CA)
		if !bytes.Equal(p.Cert, wantCert) || !bytes.Equal(p.CA, wantCA) {
			t.Fatalf("certificate or CA bundle differ from the files':\n%s\n%s", p.Cert, p.CA)
		}
		if b, _ := pem.Decode(p.Key); b == nil || b.Type != "PRIVATE KEY" {
			t.Fatalf("key is not PKCS#8 PEM: %q", p.Key)
		}
		if _, err := tls.X509KeyPair(p.Cert, p.Key); err != nil {
			t.Fatalf("the key does not go with the certificate: %v", err)
		}
	}
	checkPEM(f)
	g, err := ca.WriteHost(dir, Host{Name: "b"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Reload(g); err != nil {
		t.Fatal(err)
	}
	checkPEM(g)

	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	made, err := New(pair, roots, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := made.PEM(); !errors.Is(err, ErrNoPEM) {
		t.Fatalf("PEM of a transport made by New: %v, want ErrNoPEM", err)
	}
}
