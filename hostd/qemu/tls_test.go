package qemu

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/internal/mtls"
	"github.com/gmig-dev/gmig/internal/syncbuf"
)

// qemuMagic opens QEMU's migration stream (QEMU_VM_FILE_MAGIC, "QEVM").
var qemuMagic = []byte("QEVM")

// tlsHandshake is the first byte of a TLS stream: a handshake record
// (RFC 8446 §5.1, ContentType handshake(22)).
const tlsHandshake = 22

// needRoot returns the provisioned QEMU root (GMIG_CACHE) or skips.
func needRoot(t *testing.T) Root {
	t.Helper()
	cache := os.Getenv("GMIG_CACHE")
	if cache == "" {
		t.Skip("GMIG_CACHE is not set: no QEMU root")
	}
	r := Root(filepath.Join(cache, "qemu-root"))
	if err := r.Check(); err != nil {
		t.Skip(err)
	}
	return r
}

// syncBuffer is a QEMU's stdout and stderr.
type syncBuffer struct{ syncbuf.Buffer }

// ramPair is a source QEMU whose guest RAM holds a known pattern and a
// destination QEMU waiting for it, with a Tap between them.
type ramPair struct {
	root       Root
	spec       Spec
	scratchDir string
	pattern    []byte
	hops       int

	src, dst *VM
	dstOut   *syncBuffer
	in       *Incoming
	out      *Outgoing
	tap      *migtest.Tap
}

// newRAMPair starts the two QEMUs (no guest: firmware only) with a 1 MiB
// file of pattern loaded into guest RAM at 16 MiB by QEMU's generic
// loader, and the destination listening through a Tap.
func newRAMPair(t *testing.T, serverTLS, clientTLS *TLS) *ramPair {
	t.Helper()
	dir := t.TempDir()
	mark := make([]byte, 8)
	_, _ = rand.Read(mark)
	p := &ramPair{root: needRoot(t), pattern: []byte("gmig-ramtls-pattern-" + hex.EncodeToString(mark)), scratchDir: dir}
	img := filepath.Join(dir, "pattern.bin")
	if err := os.WriteFile(img, bytes.Repeat(p.pattern, (1<<20)/len(p.pattern)), 0o600); err != nil {
		t.Fatal(err)
	}
	p.spec = Spec{Accel: "tcg", MemoryMB: 64, Extra: []string{"-device", "loader,file=" + img + ",addr=0x1000000"}}
	p.dst = p.start(t, false, &syncBuffer{})
	p.next(t, serverTLS, clientTLS)
	return p
}

// start starts a QEMU of the pair.
func (p *ramPair) start(t *testing.T, incoming bool, out *syncBuffer) *VM {
	t.Helper()
	p.hops++
	run := filepath.Join(p.scratchDir, fmt.Sprint(p.hops))
	if err := os.Mkdir(run, 0o700); err != nil {
		t.Fatal(err)
	}
	vm, err := Start(t.Context(), Config{Spec: p.spec, Root: p.root, RunDir: run, Incoming: incoming, Serial: out})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	t.Cleanup(vm.Kill)
	return vm
}

// next makes the destination the source of the next hop, to a new
// destination listening through a new Tap.
func (p *ramPair) next(t *testing.T, serverTLS, clientTLS *TLS) {
	t.Helper()
	p.src = p.dst
	p.dstOut = &syncBuffer{}
	p.dst = p.start(t, true, p.dstOut)
	for _, c := range []*TLS{serverTLS, clientTLS} {
		if c != nil {
			c.Dir = p.scratchDir
		}
	}
	in := &Incoming{VM: p.dst, TLS: serverTLS}
	if err := in.Listen("127.0.0.1"); err != nil {
		t.Fatal(err)
	}
	p.in = in
	p.tap = migtest.NewTap(t, func() (string, error) { return strings.TrimPrefix(in.Incoming(), "tcp:"), nil })
	p.out = &Outgoing{VM: p.src, TLS: clientTLS}
}

// migrate runs the source's migration through the Tap to its end and
// resumes the VM at the destination.
func (p *ramPair) migrate(ctx context.Context) error {
	if err := p.out.Migrate(ctx, "tcp:"+p.tap.Addr()); err != nil {
		return err
	}
	if _, err := p.out.WaitPaused(ctx); err != nil {
		return err
	}
	if err := p.out.Switchover(ctx); err != nil {
		return err
	}
	if err := p.in.WaitLoaded(ctx); err != nil {
		return err
	}
	_, err := p.in.Resume(ctx)
	return err
}

// stream is what the Tap saw going to the destination (its one
// connection), once the migration is over.
func (p *ramPair) stream(t *testing.T) []byte {
	t.Helper()
	p.tap.Close()
	s := p.tap.Streams()
	if len(s) != 1 {
		t.Fatalf("the tap saw %d connections, want 1", len(s))
	}
	return s[0]
}

// testPKI makes a CA and host certificates: a and b from it, x from
// another CA.
func testPKI(t *testing.T) (a, b, x mtls.PEM) {
	t.Helper()
	issue := func(ca *mtls.CA, name string) mtls.PEM {
		cert, key, err := ca.Issue(mtls.Host{Name: name}, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		return mtls.PEM{Cert: cert, Key: key, CA: ca.CertPEM()}
	}
	ca, err := mtls.NewCA("gmig test CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	other, err := mtls.NewCA("another CA", time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	return issue(ca, "a"), issue(ca, "b"), issue(other, "x")
}

func qemuTLS(p mtls.PEM, hostname string) *TLS {
	return &TLS{Cert: p.Cert, Key: p.Key, CA: p.CA, Hostname: hostname}
}

// TestRAMStreamTLS: with gmigd's certificates on both ends, QEMU's RAM
// stream is TLS — a plain-TCP tap in the middle sees a TLS handshake and
// neither QEMU's stream magic nor the guest-RAM pattern — and the
// migration completes, then again from the QEMU that loaded it (whose
// server credentials give way to client ones); without, the tap sees both
// (what the test would see if TLS were not there). The credentials' files
// are gone once QEMU has loaded them.
func TestRAMStreamTLS(t *testing.T) {
	a, b, _ := testPKI(t)
	for _, tc := range []struct {
		name        string
		server, cli *TLS
	}{
		{"tls", qemuTLS(b, ""), qemuTLS(a, "127.0.0.1")},
		{"plain", nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			p := newRAMPair(t, tc.server, tc.cli)
			for hop := 1; ; hop++ {
				if err := p.migrate(ctx); err != nil {
					t.Fatalf("hop %d: %v\ndestination: %s", hop, err, p.dstOut)
				}
				s := p.stream(t)
				hasPattern, hasMagic := bytes.Contains(s, p.pattern), bytes.Contains(s, qemuMagic)
				t.Logf("hop %d: the tap saw %d bytes; pattern %v, QEVM %v", hop, len(s), hasPattern, hasMagic)
				if tc.server == nil {
					if !hasPattern || !bytes.HasPrefix(s, qemuMagic) {
						t.Fatalf("plain stream: pattern seen %v, starts with QEVM %v (%q)", hasPattern, bytes.HasPrefix(s, qemuMagic), s[:min(len(s), 8)])
					}
					return
				}
				if len(s) == 0 || s[0] != tlsHandshake || hasPattern || hasMagic {
					t.Fatalf("TLS stream: first byte %#x, pattern seen %v, QEVM seen %v", s[:min(len(s), 1)], hasPattern, hasMagic)
				}
				if left, _ := filepath.Glob(filepath.Join(p.scratchDir, "qemu-tls-*")); len(left) != 0 {
					t.Fatalf("credential files left behind: %v", left)
				}
				if hop == 2 {
					return
				}
				p.next(t, qemuTLS(a, ""), qemuTLS(b, "127.0.0.1"))
			}
		})
	}
}

// TestRAMStreamTLSRefusals: the destination refuses a source whose
// certificate is from another CA (verify-peer) and a source without TLS,
// and loads nothing; the source refuses a destination whose certificate
// does not name the host it migrates to, and runs on. (A refused source
// may have written its whole stream into the socket buffers before the
// destination's verdict: under TLS 1.3 the client's handshake ends before
// the server judges its certificate. gmigd trusts the destination's load,
// never the source's "completed".)
func TestRAMStreamTLSRefusals(t *testing.T) {
	a, b, x := testPKI(t)
	// x trusts the destination's CA, so only the destination's check of
	// x's certificate can stop it.
	x.CA = append(append([]byte{}, x.CA...), a.CA...)
	for _, tc := range []struct {
		name        string
		server, cli *TLS
		refusedBy   string // "destination" or "source"
	}{
		{"source-from-another-CA", qemuTLS(b, ""), qemuTLS(x, "127.0.0.1"), "destination"},
		{"source-without-TLS", qemuTLS(b, ""), nil, "destination"},
		{"destination-misnamed", qemuTLS(b, ""), qemuTLS(a, "gmig-elsewhere.example"), "source"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
			defer cancel()
			p := newRAMPair(t, tc.server, tc.cli)
			if err := p.out.Migrate(ctx, "tcp:"+p.tap.Addr()); err != nil {
				t.Fatal(err)
			}
			if tc.refusedBy == "source" {
				_, err := p.out.WaitPaused(ctx)
				if err == nil || !strings.Contains(err.Error(), "does not match the hostname") {
					t.Fatalf("the source migrated to a misnamed destination: %v", err)
				}
				if st, _ := p.src.Status(); st != "running" {
					t.Errorf("the source VM is %s after its refusal, want running", st)
				}
			} else {
				refusal := waitOutput(ctx, t, p.dstOut, "qemu-system-x86_64: ")
				t.Logf("the destination: %s", refusal)
			}
			// The destination loaded nothing: still waiting, or ended (a
			// source that hangs up after the handshake is a stream
			// without QEMU's magic).
			if m, err := p.dst.MigrationInfo(); err == nil && m.Status == "completed" {
				t.Fatal("the destination loaded the migration")
			}
			if st, err := p.dst.Status(); err == nil && st != "inmigrate" {
				t.Fatalf("the destination VM is %s, want inmigrate", st)
			}
		})
	}
}

// waitOutput waits for a line of out containing s and returns it.
func waitOutput(ctx context.Context, t *testing.T, out *syncBuffer, s string) string {
	t.Helper()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		for _, l := range strings.Split(out.String(), "\n") {
			if strings.Contains(l, s) {
				return l
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("no %q in QEMU's output: %v\n%s", s, ctx.Err(), out)
		case <-tick.C:
		}
	}
}

// TestTLSFiles: the credential files are 0600 in a 0700 directory of
// their own, owned by QEMU's user, under the names QEMU reads for the
// endpoint.
func TestTLSFiles(t *testing.T) {
	a, _, _ := testPKI(t)
	c := qemuTLS(a, "")
	c.Dir = t.TempDir()
	dir, err := writeTLSFiles("server", c, os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	check := func(path string, mode os.FileMode) {
		t.Helper()
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode().Perm() != mode || int(fi.Sys().(*syscall.Stat_t).Uid) != os.Getuid() {
			t.Errorf("%s: mode %v uid %d, want %v uid %d", path, fi.Mode().Perm(), fi.Sys().(*syscall.Stat_t).Uid, mode, os.Getuid())
		}
	}
	check(dir, 0o700)
	for _, f := range []string{tlsCAFile, tlsServerCert, tlsServerKey} {
		check(filepath.Join(dir, f), 0o600)
	}
	if _, err := os.Stat(filepath.Join(dir, tlsClientKey)); err == nil {
		t.Error("a server's directory has a client key")
	}
	if _, err := writeTLSFiles("client", &TLS{Cert: a.Cert, Dir: c.Dir}, os.Getpid()); err == nil {
		t.Error("credentials without a key or CA were written")
	}
}
