package mtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/orchestrator"
)

var _ orchestrator.Transport = (*Transport)(nil)

// noLand is a destination Host on which nothing may land.
type noLand struct {
	t     *testing.T
	calls atomic.Int32
}

func (h *noLand) Land(context.Context, orchestrator.Prepare, net.Addr) (orchestrator.Landing, error) {
	h.calls.Add(1)
	h.t.Error("Land called: a migration got past the handshake")
	return nil, errors.New("no")
}

// serveDestination runs an orchestrator Destination for h on a listener
// of tr, logging to dlog, until the test ends; it returns the address.
func serveDestination(t *testing.T, tr *Transport, h orchestrator.Host, dlog *logBuffer) string {
	t.Helper()
	l, err := tr.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := orchestrator.NewDestination(h, orchestrator.DestinationOptions{Log: dlog.logger()})
	done := make(chan error, 1)
	go func() { done <- d.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return l.Addr().String()
}

// helloFrame is a migration hello and a prepare as the protocol frames
// them (a 4-byte big-endian length, then JSON): what a peer that was let
// through would have the destination read.
func helloFrame() []byte {
	var b []byte
	for _, msg := range []string{
		`{"version":1,"kind":"migrate","id":"00112233445566778899"}`,
		`{"id":"00112233445566778899","vgpu":{"name":"x","mem_size":1048576,"gtt_entries":256},"vm_kind":"sim","strategy":"oneshot"}`,
	} {
		b = binary.BigEndian.AppendUint32(b, uint32(len(msg)))
		b = append(b, msg...)
	}
	return b
}

// TestRefusedBeforeHello: peers without a valid certificate — none, one
// from another CA, an expired one, one not allowed for client
// authentication, no TLS at all — are refused by the listener: the
// Destination never reads their hello (its Host is never asked to land
// anything and it logs nothing about them), the listener logs each
// refusal with its reason, and the peer reads nothing back. A peer with a
// good certificate then gets through (an outcome query answered).
func TestRefusedBeforeHello(t *testing.T) {
	pki := newTestPKI(t, "test CA")
	other := newTestPKI(t, "another CA")
	var tlog, dlog, slog logBuffer
	host := &noLand{t: t}
	addr := serveDestination(t, pki.transport(t, "dst", &tlog, Options{}), host, &dlog)

	now := time.Now()
	both := []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}
	expired := pki.leaf(t, "src", leafOptions{notBefore: now.Add(-48 * time.Hour), notAfter: now.Add(-24 * time.Hour), usage: both})
	serverOnly := pki.leaf(t, "src", leafOptions{notBefore: now.Add(-time.Minute), notAfter: now.Add(time.Hour),
		usage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}})
	foreign := other.leaf(t, "src", leafOptions{})
	cases := []struct {
		name string
		cert *tls.Certificate // nil: none
		tls  bool
		why  string // in the refusal's logged error
	}{
		{"no certificate", nil, true, "didn't provide a certificate"},
		{"another CA", &foreign, true, "unknown authority"},
		{"expired", &expired, true, "expired"},
		{"wrong usage", &serverOnly, true, "incompatible key usage"},
		{"not TLS", nil, false, "does not look like a TLS handshake"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			raw, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer raw.Close()
			local := raw.LocalAddr().String()
			var conn net.Conn = raw
			if c.tls {
				cfg := &tls.Config{MinVersion: tls.VersionTLS13, RootCAs: pki.roots, ServerName: "127.0.0.1"}
				if c.cert != nil {
					cert := c.cert
					cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return cert, nil }
				}
				conn = tls.Client(raw, cfg)
			}
			_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
			// In TLS 1.3 the client's handshake may end before the server
			// has judged its certificate: the refusal comes at the read.
			_, _ = conn.Write(helloFrame())
			n, err := conn.Read(make([]byte, 64))
			if err == nil || n > 0 {
				t.Fatalf("read %d bytes, %v: want the connection refused", n, err)
			}
			m := tlog.waitLine(t, "migration peer refused", "peer", local)
			if why, _ := m["error"].(string); !strings.Contains(why, c.why) {
				t.Fatalf("refusal logged as %q, want it to say %q", why, c.why)
			}
			if c.cert != nil && m["claimed_subject"] != "CN=src,O=gmig (testing only)" {
				t.Fatalf("refusal does not say who the peer claimed to be: %v", m)
			}
			t.Logf("client saw %v; server logged %q", err, m["error"])
		})
	}
	if n := host.calls.Load(); n != 0 {
		t.Fatalf("Land called %d times", n)
	}
	if s := dlog.String(); s != "" {
		t.Fatalf("the Destination saw the refused connections:\n%s", s)
	}
	if got := tlog.lines("migration peer authenticated"); len(got) != 0 {
		t.Fatalf("refused peers logged as authenticated: %v", got)
	}

	// A peer with a good certificate is let through to the orchestrator.
	src := pki.transport(t, "src", &slog, Options{})
	state, err := orchestrator.Resolve(context.Background(), src, addr, "0123456789abcdef", 10*time.Second)
	if err != nil || state != "unknown" {
		t.Fatalf("outcome query over mTLS: %q, %v", state, err)
	}
	srv := tlog.waitLine(t, "migration peer authenticated", "role", "server")
	if srv["peer_subject"] != "CN=src,O=gmig (testing only)" || srv["peer_issuer"] != "CN=test CA,O=gmig (testing only)" {
		t.Fatalf("server logged the peer as %v", srv)
	}
	cli := slog.waitLine(t, "migration peer authenticated", "role", "client")
	if cli["peer_subject"] != "CN=dst,O=gmig (testing only)" || !strings.Contains(toString(cli["peer_ips"]), "127.0.0.1") {
		t.Fatalf("client logged the peer as %v", cli)
	}
	if n := len(tlog.lines("migration peer authenticated")); n != 1 {
		t.Fatalf("%d identity lines for one connection", n)
	}
}

func toString(v any) string {
	s, _ := v.([]any)
	var b strings.Builder
	for _, x := range s {
		b.WriteString(x.(string) + " ")
	}
	return b.String()
}

// TestDialRefusesServer: a client refuses a server whose certificate is
// from another CA, or does not name the address dialled.
func TestDialRefusesServer(t *testing.T) {
	pki := newTestPKI(t, "test CA")
	other := newTestPKI(t, "another CA")
	var log logBuffer
	src := pki.transport(t, "src", &log, Options{})
	for _, c := range []struct {
		name, listen string
		dst          *Transport
		why          string
	}{
		{"another CA", "127.0.0.1:0", other.transport(t, "dst", &logBuffer{}, Options{}), "unknown authority"},
		// Linux routes all of 127/8 to loopback; the certificate names
		// only 127.0.0.1 of it.
		{"not its name", "127.0.0.2:0", pki.transport(t, "dst", &logBuffer{}, Options{}), "127.0.0.2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			l, err := c.dst.Listen(c.listen)
			if err != nil {
				t.Skipf("cannot listen on %s here: %v", c.listen, err)
			}
			defer l.Close()
			addr := l.Addr().String()
			_, err = src.Dial(context.Background(), addr)
			if err == nil || !strings.Contains(err.Error(), c.why) {
				t.Fatalf("dial: %v, want a refusal saying %q", err, c.why)
			}
			log.waitLine(t, "migration peer refused", "peer", addr)
		})
	}
}

// TestStalledHandshake: peers that connect and then send nothing, or half a
// handshake, do not hold up another peer; they are dropped after the
// handshake timeout; beyond MaxHandshakes a connection is closed at once.
func TestStalledHandshake(t *testing.T) {
	pki := newTestPKI(t, "test CA")
	var tlog, dlog logBuffer
	const timeout = 2 * time.Second
	dst := pki.transport(t, "dst", &tlog, Options{HandshakeTimeout: timeout, MaxHandshakes: 3})
	addr := serveDestination(t, dst, &noLand{t: t}, &dlog)

	silent, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	half, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer half.Close()
	// A TLS record header announcing a handshake message that never comes.
	if _, err := half.Write([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	closed := make(chan time.Duration, 2)
	for _, c := range []net.Conn{silent, half} {
		go func() {
			_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
			_, _ = c.Read(make([]byte, 1))
			closed <- time.Since(start)
		}()
	}

	// Another peer meanwhile: answered at once.
	src := pki.transport(t, "src", &logBuffer{}, Options{})
	state, err := orchestrator.Resolve(context.Background(), src, addr, "0123456789abcdef", 10*time.Second)
	good := time.Since(start)
	if err != nil || state != "unknown" {
		t.Fatalf("outcome query beside stalled handshakes: %q, %v", state, err)
	}
	if good >= timeout {
		t.Fatalf("a good peer waited %v, as long as the stalled handshakes' timeout", good)
	}

	// Two stall, one more may handshake; a fourth is over the limit:
	// closed at once.
	third, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer third.Close()
	fourth, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer fourth.Close()
	_ = fourth.SetReadDeadline(time.Now().Add(timeout / 2))
	if _, err := fourth.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !isReset(err) {
		t.Fatalf("a connection over the limit: %v, want it closed at once", err)
	}
	tlog.waitLine(t, "migration peer refused: too many handshakes in flight", "peer", fourth.LocalAddr().String())

	for range 2 {
		d := <-closed
		if d < timeout-100*time.Millisecond || d > timeout+5*time.Second {
			t.Fatalf("a stalled handshake closed after %v, want about %v", d, timeout)
		}
	}
	for _, c := range []net.Conn{silent, half} {
		m := tlog.waitLine(t, "migration peer refused", "peer", c.LocalAddr().String())
		if !strings.Contains(m["error"].(string), "handshake timeout") {
			t.Fatalf("stalled handshake logged as %v", m["error"])
		}
	}
	t.Logf("good peer answered after %v beside two stalled handshakes", good)
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}

// TestHalfClose: the channel carries bytes both ways, and a half-close
// (the migration stream's end) is seen as EOF by the peer, which can still
// answer (the verdict).
func TestHalfClose(t *testing.T) {
	pki := newTestPKI(t, "test CA")
	var log logBuffer
	dst := pki.transport(t, "dst", &log, Options{})
	src := pki.transport(t, "src", &log, Options{})
	l, err := dst.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	payload := make([]byte, 4<<20)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	errc := make(chan error, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			errc <- err
			return
		}
		defer c.Close()
		got, err := io.ReadAll(c)
		if err != nil {
			errc <- err
			return
		}
		if len(got) != len(payload) {
			errc <- errors.New("short read")
			return
		}
		_, err = c.Write([]byte("verdict"))
		errc <- err
	}()
	c, err := src.Dial(context.Background(), l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(payload); err != nil {
		t.Fatal(err)
	}
	if err := c.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	back, err := io.ReadAll(c)
	if err != nil || string(back) != "verdict" {
		t.Fatalf("answer after the half-close: %q, %v", back, err)
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestListenerClose: Close interrupts handshakes in flight, and Accept then
// returns net.ErrClosed.
func TestListenerClose(t *testing.T) {
	pki := newTestPKI(t, "test CA")
	dst := pki.transport(t, "dst", &logBuffer{}, Options{})
	l, err := dst.Listen("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	stalled, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer stalled.Close()
	accepted := make(chan error, 1)
	go func() { _, err := l.Accept(); accepted <- err }()
	time.Sleep(50 * time.Millisecond)
	closed := make(chan struct{})
	go func() { l.Close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("Close waits for a stalled handshake")
	}
	if err := <-accepted; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept after Close: %v", err)
	}
	_ = stalled.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := stalled.Read(make([]byte, 1)); err == nil || isTimeout(err) {
		t.Fatalf("the stalled connection after Close: %v, want closed", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
