package mtls

import (
	"bufio"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"github.com/gmig-dev/gmig/internal/syncbuf"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
)

// logBuffer collects zerolog's JSON lines from several goroutines.
type logBuffer struct{ syncbuf.Buffer }

func (b *logBuffer) logger() zerolog.Logger { return zerolog.New(b) }

// lines returns the log's lines whose message is msg.
func (b *logBuffer) lines(msg string) []map[string]any {
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(b.String()))
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil && m["message"] == msg {
			out = append(out, m)
		}
	}
	return out
}

// waitLine waits up to 10 s for a line with message msg whose field key
// is val, and returns it.
func (b *logBuffer) waitLine(t *testing.T, msg, key, val string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		for _, m := range b.lines(msg) {
			if m[key] == val {
				return m
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("no log line %q with %s=%s in:\n%s", msg, key, val, b.String())
	return nil
}

// testPKI is a CA with a few host certificates, all in memory.
type testPKI struct {
	ca    *CA
	roots *x509.CertPool
}

func newTestPKI(t testing.TB, name string) *testPKI {
	t.Helper()
	ca, err := NewCA(name, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	return &testPKI{ca: ca, roots: roots}
}

// leaf issues a certificate for name with o (zero: the usual one).
func (p *testPKI) leaf(t testing.TB, name string, o leafOptions) tls.Certificate {
	t.Helper()
	if o.notAfter.IsZero() {
		now := time.Now()
		o = leafOptions{notBefore: now.Add(-time.Minute), notAfter: now.Add(time.Hour),
			usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	}
	certPEM, keyPEM, err := p.ca.issue(Host{Name: name}, o)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// transport returns a Transport for host name, logging to log.
func (p *testPKI) transport(t testing.TB, name string, log *logBuffer, o Options) *Transport {
	t.Helper()
	o.Log = log.logger()
	tr, err := New(p.leaf(t, name, leafOptions{}), p.roots, o)
	if err != nil {
		t.Fatal(err)
	}
	return tr
}
