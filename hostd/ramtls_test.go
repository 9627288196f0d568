package hostd

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"testing"

	"github.com/gmig-dev/gmig/internal/mtls"
	"github.com/gmig-dev/gmig/orchestrator"
)

// TestQEMUTLSFollowsTransport: a gmigd whose migrations are mutual TLS
// gives QEMU its certificate, key and CA bundle, with the peer's host as
// the name to check and its run directory for the files; one on plain
// TCP gives QEMU none; one whose transport cannot hand its identity over
// refuses, rather than migrate QEMU's stream in the clear.
func TestQEMUTLSFollowsTransport(t *testing.T) {
	pki := t.TempDir()
	var log lockedBuffer
	h := newHostWith(t, Config{Transport: tlsTransport(t, pki, "a", &log)})
	creds, err := h.qemuTLS("b.example")
	if err != nil || creds == nil {
		t.Fatalf("with mutual TLS: %+v, %v", creds, err)
	}
	f := mtls.HostFiles(pki, "a")
	wantCert, _ := os.ReadFile(f.Cert)
	wantCA, _ := os.ReadFile(f.CA)
	if !bytes.Equal(creds.Cert, wantCert) || !bytes.Equal(creds.CA, wantCA) || len(creds.Key) == 0 {
		t.Fatalf("QEMU's credentials are not gmigd's files:\n%s\n%s", creds.Cert, creds.CA)
	}
	if creds.Hostname != "b.example" || creds.Dir != h.cfg.RunDir {
		t.Fatalf("hostname %q, directory %q; want b.example, %s", creds.Hostname, creds.Dir, h.cfg.RunDir)
	}

	for _, tr := range []orchestrator.Transport{nil, orchestrator.TCP{}} {
		if creds, err := newHostWith(t, Config{Transport: tr}).qemuTLS("b"); creds != nil || err != nil {
			t.Fatalf("transport %T: %+v, %v; want plain", tr, creds, err)
		}
	}

	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(wantCA)
	made, err := mtls.New(pair, roots, mtls.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := newHostWith(t, Config{Transport: made}).qemuTLS("b"); !errors.Is(err, mtls.ErrNoPEM) {
		t.Fatalf("a transport without PEM: %v, want mtls.ErrNoPEM", err)
	}
}
