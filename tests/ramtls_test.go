package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/gmig-dev/gmig/hostd"
	"github.com/gmig-dev/gmig/internal/cluster"
	"github.com/gmig-dev/gmig/internal/migtest"
)

// guestRAMPattern is in the guest program's binary (an error text of
// guest/workload_exec.go), which the initramfs holds: once the guest runs
// it, its pages are in guest RAM (the unpacked root and the program's
// text), so QEMU's RAM stream carries it.
var guestRAMPattern = []byte("guest: workload step needs more than")

// qemuStreamMagic opens QEMU's migration stream: QEMU_VM_FILE_MAGIC
// ("QEVM") and QEMU_VM_FILE_VERSION (3), big-endian. All eight bytes: the
// magic alone turns up by chance in about 3 % of 120 MB ciphertexts
// (120e6 / 2^32), which failed the TLS check now and then; eight bytes
// never do (120e6 / 2^64).
var qemuStreamMagic = []byte("QEVM\x00\x00\x00\x03")

// tlsHandshakeRecord is the first byte of a TLS stream: a handshake
// record (RFC 8446 §5.1, ContentType handshake(22)).
const tlsHandshakeRecord = 22

// TestMigrateQEMUEncrypted moves a running Linux VM between two gmigd whose
// migrations are mutual TLS, with QEMU's RAM stream passing through a
// plain-TCP relay in the middle (the source's hostd.RAMViaEnv hook) that
// records every byte: the migration succeeds, the relay saw a TLS stream
// and neither QEMU's stream magic nor a string the guest holds in RAM.
// The same with gmigd's -insecure-migrations shows both in the relay's
// bytes, so the test sees guest memory when it is there.
func TestMigrateQEMUEncrypted(t *testing.T) {
	e := needEnv(t)
	initrd, err := os.ReadFile(e.initrd)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(initrd, guestRAMPattern) {
		t.Fatalf("the guest image lacks %q: pick another pattern", guestRAMPattern)
	}
	for _, c := range []struct {
		name    string
		withTLS bool
	}{{"mtls", true}, {"insecure", false}} {
		t.Run(c.name, func(t *testing.T) { migrateThroughTap(t, e, c.withTLS) })
	}
}

func migrateThroughTap(t *testing.T, e env, withTLS bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*e2eTimeout())
	defer cancel()
	var source atomic.Pointer[cluster.Daemon] // set once the daemons run
	tap := migtest.NewTap(t, func() (string, error) { return lastIncoming(source.Load()) })
	t.Setenv(hostd.RAMViaEnv, tap.Addr()) // the daemons inherit it; only a source uses it
	p := newPairTLS(t, ctx, e, withTLS)
	p.dumpOnFailure("vm")
	a, b := p.d[0], p.d[1]
	source.Store(a)
	con := p.startVM("vm", e.vmSpec("q35", "msi", 4000, 130))
	at := waitStep(ctx, t, con, 20)
	t.Logf("A→B at step %d", at)
	rep, err := a.Client.Migrate(ctx, "vm", hostd.MigrateRequest{To: b.Addr}, nil)
	if err != nil {
		t.Fatal(err)
	}
	checkMigrated(t, rep, a, b, "vm")
	conB := cluster.Follow(b.Console("vm"))
	defer conB.Close()
	waitStep(ctx, t, conB, at+1)

	tap.Close()
	streams := tap.Streams()
	if len(streams) != 1 {
		t.Fatalf("the relay saw %d connections, want QEMU's one", len(streams))
	}
	s := streams[0]
	hasPattern, hasMagic := bytes.Contains(s, guestRAMPattern), bytes.Contains(s, qemuStreamMagic)
	t.Logf("the relay saw %d bytes of QEMU's stream (QEMU sent %d of RAM); guest pattern %v, QEVM %v", len(s), rep.VMM.Transferred, hasPattern, hasMagic)
	if uint64(len(s)) < rep.VMM.Transferred {
		t.Fatalf("the relay saw %d bytes, less than the %d QEMU transferred: not the RAM stream", len(s), rep.VMM.Transferred)
	}
	if !withTLS {
		if !hasPattern || !bytes.HasPrefix(s, qemuStreamMagic) {
			t.Fatalf("plain stream: guest pattern seen %v, starts with QEVM %v (%q)", hasPattern, bytes.HasPrefix(s, qemuStreamMagic), s[:min(len(s), 8)])
		}
		return
	}
	if s[0] != tlsHandshakeRecord || hasPattern || hasMagic {
		t.Fatalf("TLS stream: first byte %#x, guest pattern seen %v, QEVM seen %v", s[0], hasPattern, hasMagic)
	}
}

// lastIncoming is the destination QEMU's address that d last logged as a
// migration's source ("destination ready").
func lastIncoming(d *cluster.Daemon) (string, error) {
	if d == nil {
		return "", errors.New("no source daemon yet")
	}
	f, err := os.Open(filepath.Join(d.RunDir, "gmigd.log"))
	if err != nil {
		return "", err
	}
	defer f.Close()
	last := ""
	sc := bufio.NewScanner(f)
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		var m struct {
			Message  string `json:"message"`
			Incoming string `json:"incoming"`
		}
		if json.Unmarshal(sc.Bytes(), &m) == nil && m.Message == "destination ready" && m.Incoming != "" {
			last = m.Incoming
		}
	}
	if last == "" {
		return "", errors.New("gmigd " + d.Name + " logged no destination yet")
	}
	return strings.TrimPrefix(last, "tcp:"), nil
}
