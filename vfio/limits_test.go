package vfio

import (
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Timing in these tests: limits are short (tens to hundreds of ms) so the
// tests run fast, and every assertion is a bound with a wide margin (an
// event comes no earlier than its limit and within 20 times it), never an
// exact time, so a loaded 2-core machine passes them too.

// Log messages the tests look for.
const (
	logDropped = "vfio-user client dropped: message not complete within the message timeout"
	logRefused = "vfio-user client refused: another client is attached"
)

// expectClosed reads c, dropping whatever arrives, until the server closes
// it; the close must come before start+bound. It returns the time from
// start to the close.
func expectClosed(t *testing.T, c *net.UnixConn, start time.Time, bound time.Duration) time.Duration {
	t.Helper()
	if err := c.SetReadDeadline(start.Add(bound)); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64<<10)
	for {
		_, err := c.Read(buf)
		switch {
		case err == nil:
			continue
		case errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET):
			return time.Since(start)
		case errors.Is(err, os.ErrDeadlineExceeded):
			t.Fatalf("connection still open after %v", bound)
		default:
			t.Fatalf("reading until close: %v", err)
		}
	}
}

// attachClient dials ts and leaves state behind for the next client to
// see or not see: a DMA mapping, an INTx eventfd and a register value.
// It returns the client and the INTx eventfd.
func attachClient(t *testing.T, ts *testServer) (*Client, *os.File) {
	t.Helper()
	c := dial(t, ts.path)
	if err := c.MapDMA(DMARegion{IOVA: 0, Size: guestRAM, Prot: DMAProtRead | DMAProtWrite, File: memfd(t, guestRAM)}); err != nil {
		t.Fatal(err)
	}
	trigger := eventfd(t)
	if err := c.SetIRQs(IRQSet{Index: PCIINTxIRQIndex, Flags: IRQSetDataEventfd | IRQSetActionTrigger, Count: 1, FDs: []*os.File{trigger}}); err != nil {
		t.Fatal(err)
	}
	if err := c.WriteRegion(fakeRegsIndex, 0x40, ne.AppendUint32(nil, 0xcafe)); err != nil {
		t.Fatal(err)
	}
	return c, trigger
}

// TestStalledHeaderTimesOut: a client that starts a message and stalls is
// dropped once the message timeout has passed (not before, and well within
// 20 times it), with one log line; its DMA and eventfds go as on a
// disconnect, the device keeps its state, and the next client is served.
func TestStalledHeaderTimesOut(t *testing.T) {
	const timeout = 100 * time.Millisecond
	getInfo := Header{ID: 9, Command: CmdDeviceGetInfo, Size: HeaderSize + DeviceInfoMsgSize}.Append(nil)
	write := append(Header{ID: 9, Command: CmdRegionWrite, Size: HeaderSize + RegionAccessSize + 4}.Append(nil),
		append(RegionAccessMsg{Region: fakeRegsIndex, Count: 4}.Append(nil), 1, 2, 3, 4)...)
	for _, tc := range []struct {
		name  string
		bytes []byte // what the client sends before it stalls
		cmd   string // the command the log line names; "" while the header is incomplete
	}{
		{"partial header", getInfo[:7], ""},
		{"header without payload", getInfo, "DEVICE_GET_INFO"},
		{"payload cut short", write[:HeaderSize+RegionAccessSize+1], "REGION_WRITE"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// A long busy wait: the next client must be served because the
			// stalled one was dropped, not refused for want of patience.
			ts := startServerWith(t, ServerConfig{MessageTimeout: timeout, BusyWait: time.Minute})
			c1, trigger := attachClient(t, ts)

			start := time.Now()
			if _, err := c1.conn.Write(tc.bytes); err != nil {
				t.Fatal(err)
			}
			took := expectClosed(t, c1.conn, start, 20*timeout)
			if took < timeout {
				t.Errorf("stalled client dropped after %v, before the %v timeout", took, timeout)
			}
			lines := ts.logs.withMessage(t, logDropped)
			if len(lines) != 1 {
				t.Fatalf("%d %q log lines, want 1", len(lines), logDropped)
			}
			if l := lines[0]; l["level"] != "warn" || l["op"] != "receiving" || l["bytes_done"] != float64(len(tc.bytes)) ||
				(tc.cmd != "" && l["cmd"] != tc.cmd) || (tc.cmd == "" && l["cmd"] != nil) {
				t.Errorf("log line %v", l)
			}

			// Once the next client is served, the dropped one's cleanup is
			// done (the server takes it only then).
			c2 := dial(t, ts.path)
			if n := len(ts.srv.DMA().Regions()); n != 0 {
				t.Errorf("%d DMA regions left after the drop", n)
			}
			ts.srv.IRQs().SetINTx(true)
			if n := pollCount(t, trigger); n != 0 {
				t.Errorf("dropped client's eventfd signalled %d", n)
			}
			ts.srv.IRQs().SetINTx(false)
			buf := make([]byte, 4)
			if err := c2.ReadRegion(fakeRegsIndex, 0x40, buf); err != nil || ne.Uint32(buf) != 0xcafe {
				t.Fatalf("device state after the drop: %x, %v", buf, err)
			}
		})
	}
}

// TestStalledReaderTimesOut: a client that sends requests but stops
// reading the replies holds the server only until a reply has waited the
// message timeout to be taken; then it is dropped and the next client is
// served.
func TestStalledReaderTimesOut(t *testing.T) {
	const timeout = 100 * time.Millisecond
	// The next client is refused after 20 timeouts if the stalled one is
	// still held by then.
	ts := startServerWith(t, ServerConfig{MessageTimeout: timeout, BusyWait: 20 * timeout})
	r := dialRaw(t, ts.path)
	r.command(1, CmdVersion, 0, encodeVersion(VersionMsg{}, clientCaps))
	r.expectOK("VERSION", 1)
	// 64 replies of 64 KiB, far beyond what the socket buffers hold.
	// All requests in one write, so none can meet a closed socket.
	const reads = 64
	var reqs []byte
	for i := range reads {
		p := RegionAccessMsg{Region: fakeApertureIdx, Count: fakeApertureSz}.Append(nil)
		reqs = Header{ID: uint16(2 + i), Command: CmdRegionRead, Size: uint32(HeaderSize + len(p))}.Append(reqs)
		reqs = append(reqs, p...)
	}
	if _, err := r.c.Write(reqs); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	r2 := dialRaw(t, ts.path)
	r2.c.SetReadDeadline(start.Add(40 * timeout))
	r2.command(1, CmdVersion, 0, encodeVersion(VersionMsg{}, clientCaps))
	r2.expectOK("VERSION of the next client", 1)
	lines := ts.logs.withMessage(t, logDropped)
	if len(lines) != 1 || lines[0]["op"] != "sending" || lines[0]["cmd"] != "REGION_READ" {
		t.Fatalf("log lines %v, want one for a REGION_READ reply not taken", lines)
	}
	// What the stalled client finds when it reads at last: some replies,
	// then the end, not all 64.
	got := 0
	r.c.SetReadDeadline(start.Add(20 * timeout))
	for {
		m, err := r.tr.recv(1 << 21)
		if err != nil {
			if !isDisconnect(err) {
				t.Fatalf("draining the stalled client: %v", err)
			}
			break
		}
		got++
		m.closeFDs()
	}
	if got >= reads {
		t.Fatalf("stalled client got all %d replies", got)
	}
}

// TestIdleClientNotDropped: silence between messages is never timed. A
// client idle for ten message timeouts, after messages that armed and
// cleared the deadline, is then served on the same connection.
func TestIdleClientNotDropped(t *testing.T) {
	const timeout = 50 * time.Millisecond
	ts := startServerWith(t, ServerConfig{MessageTimeout: timeout})
	c := dial(t, ts.path)
	if err := c.WriteRegion(fakeRegsIndex, 0x40, ne.AppendUint32(nil, 0xbeef)); err != nil {
		t.Fatal(err)
	}
	// The idle period is what is tested: nothing is waited for.
	<-time.After(10 * timeout)
	buf := make([]byte, 4)
	if err := c.ReadRegion(fakeRegsIndex, 0x40, buf); err != nil || ne.Uint32(buf) != 0xbeef {
		t.Fatalf("idle client after %v: %x, %v", 10*timeout, buf, err)
	}
	<-time.After(10 * timeout)
	if _, err := c.DeviceInfo(); err != nil {
		t.Fatalf("idle client after a second idle period: %v", err)
	}
	if lines := ts.logs.withMessage(t, logDropped); len(lines) != 0 {
		t.Fatalf("idle client dropped: %v", lines)
	}
}

// TestSecondClientRefused: a client that connects while another is served
// waits the busy wait, then its VERSION gets an error reply with EBUSY and
// the connection is closed, with one log line; Dial reports EBUSY. The
// first client is unaffected throughout.
func TestSecondClientRefused(t *testing.T) {
	const busyWait = 100 * time.Millisecond
	ts := startServerWith(t, ServerConfig{BusyWait: busyWait})
	c1, trigger := attachClient(t, ts)

	start := time.Now()
	r := dialRaw(t, ts.path)
	r.c.SetReadDeadline(start.Add(20 * busyWait))
	r.command(7, CmdVersion, 0, encodeVersion(VersionMsg{}, clientCaps))
	r.expectError("VERSION from a second client", 7, unix.EBUSY)
	if took := expectClosed(t, r.c, start, 20*busyWait); took < busyWait {
		t.Errorf("refused after %v, before the %v busy wait", took, busyWait)
	}
	lines := ts.logs.withMessage(t, logRefused)
	if len(lines) != 1 {
		t.Fatalf("%d %q log lines, want 1", len(lines), logRefused)
	}
	if l := lines[0]; l["level"] != "warn" || l["cmd"] != "VERSION" || l["id"] != float64(7) || l["reply"] != "EBUSY" {
		t.Errorf("log line %v", l)
	}

	if c, err := Dial(ts.path); !errors.Is(err, unix.EBUSY) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("Dial while another client is served: %v, want EBUSY", err)
	}

	// The first client kept everything.
	buf := make([]byte, 4)
	if err := c1.ReadRegion(fakeRegsIndex, 0x40, buf); err != nil || ne.Uint32(buf) != 0xcafe {
		t.Fatalf("first client after the refusals: %x, %v", buf, err)
	}
	if n := len(ts.srv.DMA().Regions()); n != 1 {
		t.Errorf("%d DMA regions, want the first client's 1", n)
	}
	ts.srv.IRQs().SetINTx(true)
	if n := pollCount(t, trigger); n != 1 {
		t.Errorf("first client's INTx eventfd count %d, want 1", n)
	}
	ts.srv.IRQs().SetINTx(false)
	if lines := ts.logs.withMessage(t, "vfio-user client disconnected"); len(lines) != 0 {
		t.Errorf("a client was disconnected: %v", lines)
	}
}

// TestWaitingClientServedWhenFirstLeaves: a client that connects while
// another is served, and sends VERSION at once, is served as soon as the
// first leaves within the busy wait.
func TestWaitingClientServedWhenFirstLeaves(t *testing.T) {
	ts := startServerWith(t, ServerConfig{BusyWait: time.Minute})
	c1 := dial(t, ts.path)
	r := dialRaw(t, ts.path)
	r.command(1, CmdVersion, 0, encodeVersion(VersionMsg{}, clientCaps))
	c1.Close()
	r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	r.expectOK("VERSION of the waiting client", 1)
	r.command(2, CmdDeviceGetInfo, 0, DeviceInfoMsg{Argsz: DeviceInfoMsgSize}.Append(nil))
	r.expectOK("GET_INFO of the waiting client", 2)
	if lines := ts.logs.withMessage(t, logRefused); len(lines) != 0 {
		t.Fatalf("waiting client refused: %v", lines)
	}
}

// TestTooManyWaitingClosed: beyond maxWaitingClients connections waiting
// at once, a further one is closed at once, unanswered; the served client
// is unaffected.
func TestTooManyWaitingClosed(t *testing.T) {
	ts := startServerWith(t, ServerConfig{BusyWait: time.Minute})
	c1 := dial(t, ts.path)
	for range maxWaitingClients {
		dialRaw(t, ts.path)
	}
	r := dialRaw(t, ts.path)
	expectClosed(t, r.c, time.Now(), 10*time.Second)
	if lines := ts.logs.withMessage(t, "vfio-user client refused: too many clients waiting"); len(lines) != 1 {
		t.Fatalf("%d log lines for the extra client, want 1", len(lines))
	}
	if _, err := c1.DeviceInfo(); err != nil {
		t.Fatalf("served client: %v", err)
	}
}
