package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/internal/mtls"
	"github.com/gmig-dev/gmig/internal/sdnotify"
	"github.com/gmig-dev/gmig/internal/syncbuf"
)

// lockedBuffer is stderr for a daemon run in the test: its log lines.
type lockedBuffer struct{ syncbuf.Buffer }

// TestServeSignals runs gmigd serve from a configuration file under a
// fake systemd (a NOTIFY_SOCKET listener): READY=1 arrives once the
// control API answers and the migration listener accepts; SIGHUP reloads
// the certificates between RELOADING=1 and READY=1, so that the listener
// presents the renewed certificate; a broken certificate on the next
// SIGHUP keeps the renewed one and logs why; SIGTERM sends STOPPING=1 and
// serve returns. On main, SIGHUP killed the daemon.
func TestServeSignals(t *testing.T) {
	dir := t.TempDir()
	pki := filepath.Join(dir, "pki")
	captureStdout(t, func() error { return cmdCerts([]string{"-out", pki, "-hosts", "a,b"}) })
	a, b := mtls.HostFiles(pki, "a"), mtls.HostFiles(pki, "b")
	runDir := filepath.Join(dir, "run")
	conf := filepath.Join(dir, "gmigd.conf")
	if err := os.WriteFile(conf, []byte(strings.Join([]string{
		"# gmigd serve", "pool = 8M", "run-dir = " + runDir, "migrate-listen = 127.0.0.1:0",
		"tls-cert = " + a.Cert, "tls-key = " + a.Key, "tls-ca = " + a.CA, ""}, "\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "notify")
	nl, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: sock, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	defer nl.Close()
	t.Setenv(sdnotify.EnvSocket, sock)
	next := func() string {
		t.Helper()
		buf := make([]byte, 512)
		if err := nl.SetReadDeadline(time.Now().Add(30 * time.Second)); err != nil {
			t.Fatal(err)
		}
		n, err := nl.Read(buf)
		if err != nil {
			t.Fatalf("no notification: %v", err)
		}
		return string(buf[:n])
	}

	var stderr lockedBuffer
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	old := os.Stderr
	os.Stderr = w
	copied := make(chan struct{})
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := r.Read(buf)
			stderr.Write(buf[:n])
			if err != nil {
				close(copied)
				return
			}
		}
	}()
	served := make(chan error, 1)
	go func() { served <- cmdServe([]string{"-config", conf, "-log-level", "debug"}) }()
	defer func() {
		os.Stderr = old
		w.Close()
		<-copied
		if t.Failed() {
			t.Logf("gmigd log:\n%s", stderr.String())
		}
	}()

	if got := next(); got != sdnotify.Ready {
		t.Fatalf("first notification %q, want %q", got, sdnotify.Ready)
	}
	// READY means both sockets already accept: no retry here.
	if _, err := hostd.NewClient(filepath.Join(runDir, "gmigd.sock")).List(); err != nil {
		t.Fatalf("the control API after READY=1: %v", err)
	}
	addr, err := os.ReadFile(filepath.Join(runDir, MigrateAddrFile))
	if err != nil {
		t.Fatal(err)
	}
	client, err := mtls.Load(b, mtls.Options{})
	if err != nil {
		t.Fatal(err)
	}
	presented := func() *x509.Certificate {
		t.Helper()
		c, err := client.Dial(context.Background(), strings.TrimSpace(string(addr)))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		return c.(*tls.Conn).ConnectionState().PeerCertificates[0]
	}
	first := presented()

	hup := func() {
		t.Helper()
		if err := syscall.Kill(os.Getpid(), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		if got := next(); !strings.HasPrefix(got, sdnotify.Reloading+"\nMONOTONIC_USEC=") {
			t.Fatalf("after SIGHUP %q, want RELOADING=1", got)
		}
		if got := next(); got != sdnotify.Ready {
			t.Fatalf("after the reload %q, want READY=1", got)
		}
	}
	ca, err := mtls.LoadCA(filepath.Join(pki, mtls.CACertFile), filepath.Join(pki, mtls.CAKeyFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ca.WriteHost(pki, mtls.Host{Name: "a"}, time.Hour); err != nil { // renewed
		t.Fatal(err)
	}
	hup()
	renewed := presented()
	if renewed.SerialNumber.Cmp(first.SerialNumber) == 0 || time.Until(renewed.NotAfter) > 2*time.Hour {
		t.Fatalf("after SIGHUP the listener still presents serial %s (not after %v)", renewed.SerialNumber, renewed.NotAfter)
	}

	if err := os.WriteFile(a.Cert, []byte("garbage\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	hup()
	if got := presented(); got.SerialNumber.Cmp(renewed.SerialNumber) != 0 {
		t.Fatalf("a broken certificate replaced the renewed one: serial %s", got.SerialNumber)
	}
	if !strings.Contains(stderr.String(), "certificates not reloaded: migrations keep the previous ones") {
		t.Fatalf("no log line for the refused reload:\n%s", stderr.String())
	}

	if err := syscall.Kill(os.Getpid(), syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if got := next(); got != sdnotify.Stopping {
		t.Fatalf("after SIGTERM %q, want %q", got, sdnotify.Stopping)
	}
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not return after SIGTERM")
	}
}
