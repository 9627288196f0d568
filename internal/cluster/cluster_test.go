package cluster

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/internal/mtls"
	"github.com/gmig-dev/gmig/orchestrator"
)

func buildGmigd(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs gmigd")
	}
	bin := filepath.Join(t.TempDir(), "gmigd")
	if out, err := exec.Command("go", "build", "-o", bin, "github.com/gmig-dev/gmig/cmd/gmigd").CombinedOutput(); err != nil {
		t.Fatalf("building gmigd: %v\n%s", err, out)
	}
	return bin
}

// TestDaemonsUseMutualTLS: daemons started by the harness share one CA
// made once per cluster directory, each with its own certificate (kept
// across a restart); a peer with a certificate from it is let through to
// the migration protocol and logged by its name, a peer without TLS is
// refused; the control socket is 0600; an insecure daemon says so.
func TestDaemonsUseMutualTLS(t *testing.T) {
	bin := buildGmigd(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	dir := t.TempDir()
	start := func(name string, o Options) *Daemon {
		o.Binary, o.Pool = bin, "16M"
		d, err := Start(ctx, dir, name, o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Stop(10 * time.Second) })
		return d
	}
	a, b := start("a", Options{}), start("b", Options{})
	if a.TLS.CA != b.TLS.CA || a.TLS.Cert == b.TLS.Cert {
		t.Fatalf("files: a %+v, b %+v", a.TLS, b.TLS)
	}
	for _, d := range []*Daemon{a, b} {
		waitLog(t, d, `"message":"migrations use mutual TLS"`)
		fi, err := os.Lstat(filepath.Join(d.RunDir, "gmigd.sock"))
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != 0o600 || fi.Sys().(*syscall.Stat_t).Uid != uint32(os.Geteuid()) {
			t.Fatalf("%s's control socket: %v", d.Name, fi.Mode())
		}
	}

	// A's certificate gets through to b's migration protocol.
	tr, err := mtls.Load(a.TLS, mtls.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if state, err := orchestrator.Resolve(ctx, tr, b.Addr, "0123456789abcdef", 10*time.Second); err != nil || state != "unknown" {
		t.Fatalf("query over mTLS: %q, %v", state, err)
	}
	waitLog(t, b, `"peer_subject":"CN=a,O=gmig (testing only)"`)

	// A plain TCP hello is refused at the handshake.
	c, err := net.Dial("tcp", b.Addr)
	if err != nil {
		t.Fatal(err)
	}
	hello := `{"version":1,"kind":"query","id":"0123456789abcdef"}`
	_, _ = c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(len(hello))), hello...))
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Read(make([]byte, 64)); n > 0 || err == nil {
		t.Fatalf("a plain TCP peer read %d bytes, %v", n, err)
	}
	c.Close()
	waitLog(t, b, `"message":"migration peer refused"`)

	// A restart keeps b's certificate.
	cert, _ := os.ReadFile(b.TLS.Cert)
	b.Stop(10 * time.Second)
	b2 := start("b", Options{})
	if again, _ := os.ReadFile(b2.TLS.Cert); !bytes.Equal(cert, again) {
		t.Fatal("a restarted daemon got a new certificate")
	}

	// Insecure on request, and it says so.
	c3 := start("c", Options{Insecure: true})
	waitLog(t, c3, "neither authenticated nor encrypted")
	if n := strings.Count(c3.LogTail(100), "neither authenticated nor encrypted"); n != 1 {
		t.Fatalf("the insecure warning logged %d times", n)
	}
}

// waitLog waits for a line of d's log containing s.
func waitLog(t *testing.T, d *Daemon, s string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if strings.Contains(d.LogTail(1000), s) {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("gmigd %s never logged %s:\n%s", d.Name, s, d.LogTail(30))
}
