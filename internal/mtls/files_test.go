package mtls

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestParseHosts(t *testing.T) {
	hs, err := ParseHosts("a, b=10.0.0.12+b.example,")
	if err != nil {
		t.Fatal(err)
	}
	want := []Host{{Name: "a"}, {Name: "b", SANs: []string{"10.0.0.12", "b.example"}}}
	if len(hs) != 2 || hs[0].Name != want[0].Name || len(hs[0].SANs) != 0 || hs[1].Name != "b" || !slices.Equal(hs[1].SANs, want[1].SANs) {
		t.Fatalf("got %+v", hs)
	}
	for _, bad := range []string{"", ",", "../x", "a/b", "a=", "a=x y", ".a"} {
		if _, err := ParseHosts(bad); !errors.Is(err, ErrHost) {
			t.Errorf("ParseHosts(%q): %v, want ErrHost", bad, err)
		}
	}
}

// TestEnsure: one CA per directory, a certificate per host with the
// host's names and the loopback ones and both usages, files with their
// modes whatever the umask, reused when good, re-issued when a name is
// missing; concurrent callers share one CA.
func TestEnsure(t *testing.T) {
	old := syscall.Umask(0)
	t.Cleanup(func() { syscall.Umask(old) })
	dir := filepath.Join(t.TempDir(), "tls")
	var wg sync.WaitGroup
	files := make([]Files, 4)
	errs := make([]error, 4)
	for i, name := range []string{"a", "b", "c", "d"} {
		wg.Go(func() { files[i], errs[i] = Ensure(dir, Host{Name: name}) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	ca, err := LoadCA(filepath.Join(dir, CACertFile), filepath.Join(dir, CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range files {
		cert, err := readCert(f.Cert)
		if err != nil {
			t.Fatal(err)
		}
		if err := cert.CheckSignatureFrom(ca.Cert); err != nil {
			t.Fatalf("host %d: not from the directory's one CA: %v", i, err)
		}
		if !slices.Contains(cert.DNSNames, "localhost") || !slices.Contains(cert.DNSNames, cert.Subject.CommonName) || len(cert.IPAddresses) != 2 {
			t.Fatalf("host %s: names %v %v", cert.Subject.CommonName, cert.DNSNames, cert.IPAddresses)
		}
		if !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageServerAuth) || !slices.Contains(cert.ExtKeyUsage, x509.ExtKeyUsageClientAuth) {
			t.Fatalf("usages %v", cert.ExtKeyUsage)
		}
		if _, ok := cert.PublicKey.(*ecdsa.PublicKey); !ok || cert.PublicKey.(*ecdsa.PublicKey).Curve != elliptic.P256() {
			t.Fatalf("key %T, want ECDSA P-256", cert.PublicKey)
		}
	}
	for path, mode := range map[string]os.FileMode{
		dir: 0o700 | os.ModeDir, files[0].Key: 0o600, files[0].Cert: 0o644,
		filepath.Join(dir, CAKeyFile): 0o600, filepath.Join(dir, CACertFile): 0o644,
	} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != mode {
			t.Errorf("%s: mode %v, want %v", path, fi.Mode(), mode)
		}
	}

	// Again: the same files. With a new name: a new certificate.
	before, _ := os.ReadFile(files[0].Cert)
	if _, err := Ensure(dir, Host{Name: "a"}); err != nil {
		t.Fatal(err)
	}
	if after, _ := os.ReadFile(files[0].Cert); !bytes.Equal(before, after) {
		t.Fatal("a good certificate was issued again")
	}
	if _, err := Ensure(dir, Host{Name: "a", SANs: []string{"10.9.8.7"}}); err != nil {
		t.Fatal(err)
	}
	cert, err := readCert(files[0].Cert)
	if err != nil {
		t.Fatal(err)
	}
	if len(cert.IPAddresses) != 3 || cert.IPAddresses[0].String() != "10.9.8.7" {
		t.Fatalf("after adding a name: %v", cert.IPAddresses)
	}
	// The files work as a Transport's.
	if _, err := Load(files[0], Options{}); err != nil {
		t.Fatal(err)
	}
}

// TestLoad refuses what can only fail later: a certificate not from the
// CA bundle, an expired one, a bundle without certificates; it warns
// about a key others can read, and never logs key material.
func TestLoad(t *testing.T) {
	dir := t.TempDir()
	ca, err := EnsureCA(dir, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	good, err := ca.WriteHost(dir, Host{Name: "a"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	otherDir := t.TempDir()
	other, err := EnsureCA(otherDir, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	foreign, err := other.WriteHost(otherDir, Host{Name: "a"}, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	certPEM, keyPEM, err := ca.issue(Host{Name: "old"}, leafOptions{notBefore: now.Add(-2 * time.Hour), notAfter: now.Add(-time.Hour),
		usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}})
	if err != nil {
		t.Fatal(err)
	}
	expired := HostFiles(dir, "old")
	if err := writeFile(expired.Cert, certPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writeFile(expired.Key, keyPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "empty.pem")
	if err := os.WriteFile(empty, []byte("nothing\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]Files{
		"another CA's":   {Cert: foreign.Cert, Key: foreign.Key, CA: good.CA},
		"expired":        expired,
		"empty bundle":   {Cert: good.Cert, Key: good.Key, CA: empty},
		"key of another": {Cert: good.Cert, Key: foreign.Key, CA: good.CA},
		"missing":        {Cert: good.Cert, Key: good.Key},
	} {
		if _, err := Load(f, Options{}); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", name, err)
		}
	}

	if err := os.Chmod(good.Key, 0o644); err != nil {
		t.Fatal(err)
	}
	var log logBuffer
	if _, err := Load(good, Options{Log: log.logger()}); err != nil {
		t.Fatal(err)
	}
	if len(log.lines("the TLS private key is readable by others than its owner; chmod 0600 it")) != 1 {
		t.Fatalf("no warning about a readable key:\n%s", log.String())
	}
	key, _ := os.ReadFile(good.Key)
	for _, line := range strings.Split(string(key), "\n") {
		if len(line) > 16 && !strings.HasPrefix(line, "-----") && strings.Contains(log.String(), line) {
			t.Fatal("key material in the log")
		}
	}
}
