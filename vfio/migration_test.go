package vfio

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"

	"golang.org/x/sys/unix"
)

// fakeMigrator is a fakeDevice that migrates: it records every arc it is
// asked to take, serves out as its migration data (the first preLen bytes in
// PRE_COPY, the rest in STOP_COPY, at most chunk bytes per call) and keeps
// what it receives in RESUMING. It checks that the server calls it only as
// the contract allows.
type fakeMigrator struct {
	*fakeDevice
	flags  uint64
	out    []byte
	preLen int
	chunk  int

	mu       sync.Mutex
	state    MigState
	hops     [][2]MigState
	pos      int
	in       []byte
	loaded   []byte
	failArc  [2]MigState // this arc fails with failErr
	failErr  error
	readErr  error // MigDataRead fails with it
	reject   bool  // RESUMING -> STOP refuses the data
	misusage []string
}

func newFakeMigrator(dev *fakeDevice, flags uint64, out []byte, preLen int) *fakeMigrator {
	return &fakeMigrator{fakeDevice: dev, flags: flags, out: out, preLen: preLen, chunk: 7000, state: MigStateRunning}
}

func (f *fakeMigrator) MigrationFlags() uint64 { return f.flags }

func (f *fakeMigrator) SetMigState(from, to MigState) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if from != f.state || !MigArc(from, to, f.flags&^MigrationP2P) {
		f.misusage = append(f.misusage, fmt.Sprintf("arc %s -> %s in %s", from, to, f.state))
	}
	if f.failArc == [2]MigState{from, to} {
		if errors.Is(f.failErr, ErrMigStateLost) {
			f.state = MigStateError
		}
		return f.failErr
	}
	if from == MigStateResuming && f.reject {
		return fmt.Errorf("fake: incoming data refused: %w", unix.EILSEQ)
	}
	f.hops = append(f.hops, [2]MigState{from, to})
	switch {
	case to.saving() && !from.saving():
		f.pos = 0 // a new data transfer session
	case to == MigStateResuming:
		f.in = nil
	case from == MigStateResuming:
		f.loaded = slices.Clone(f.in)
	}
	f.state = to
	return nil
}

func (f *fakeMigrator) MigDataRead(p []byte) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.state.saving() {
		f.misusage = append(f.misusage, "read in "+f.state.String())
	}
	if f.readErr != nil {
		return 0, f.readErr
	}
	limit := len(f.out)
	if f.state == MigStatePreCopy {
		limit = min(f.preLen, limit)
	}
	if f.pos >= limit {
		if f.state == MigStateStopCopy {
			return 0, io.EOF
		}
		return 0, nil
	}
	n := copy(p[:min(len(p), f.chunk)], f.out[f.pos:limit])
	f.pos += n
	return n, nil
}

func (f *fakeMigrator) MigDataWrite(p []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.state != MigStateResuming {
		f.misusage = append(f.misusage, "write in "+f.state.String())
	}
	f.in = append(f.in, p...)
	return nil
}

func (f *fakeMigrator) MigDataSize() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return uint64(len(f.out) - f.pos)
}

func (f *fakeMigrator) Reset() error {
	f.fakeDevice.Reset()
	f.mu.Lock()
	defer f.mu.Unlock()
	f.state = MigStateRunning
	return nil
}

// takeHops returns and forgets the recorded arcs; it fails the test on any
// misuse seen so far.
func (f *fakeMigrator) takeHops(t *testing.T) [][2]MigState {
	t.Helper()
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, m := range f.misusage {
		t.Errorf("device misused: %s", m)
	}
	f.misusage = nil
	h := f.hops
	f.hops = nil
	return h
}

func (f *fakeMigrator) loadedData() []byte {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.loaded
}

// hops parses "A>B C>D" into arcs, in order.
func hops(t *testing.T, list string) [][2]MigState {
	var h [][2]MigState
	for _, a := range strings.Fields(list) {
		from, to, _ := strings.Cut(a, ">")
		h = append(h, [2]MigState{parseState(t, from), parseState(t, to)})
	}
	return h
}

func expectHops(t *testing.T, f *fakeMigrator, want string) {
	t.Helper()
	got := f.takeHops(t)
	if w := hops(t, want); !slices.Equal(got, w) {
		t.Errorf("device took arcs %v, want %v", got, w)
	}
}

func expectMigState(t *testing.T, c *Client, want MigState) {
	t.Helper()
	got, err := c.MigState()
	if err != nil || got != want {
		t.Fatalf("migration state %s, %v; want %s", got, err, want)
	}
}

func expectErrno(t *testing.T, what string, err error, errno unix.Errno) {
	t.Helper()
	if !errors.Is(err, errno) {
		t.Errorf("%s: %v, want %s", what, err, unix.ErrnoName(errno))
	}
}

// migrationBlob is test migration data that shows misplaced bytes.
func migrationBlob(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7 + i>>8)
	}
	return b
}

const fakeMigFlags = MigrationStopCopy | MigrationPreCopy

// startMigServer serves a fakeMigrator over a socket.
func startMigServer(t *testing.T, flags uint64, out []byte, preLen int, maxXfer uint32) (*testServer, *fakeMigrator) {
	t.Helper()
	dev := newFakeMigrator(newFakeDevice(t), flags, out, preLen)
	ts := startServerFor(t, dev, maxXfer)
	ts.dev = dev.fakeDevice
	return ts, dev
}

// TestMigrationSourceToDestination drives a source device through
// RUNNING -> PRE_COPY (part of the data) -> STOP_COPY (the rest, to the end)
// -> STOP, and a destination through RUNNING -> RESUMING (via STOP) ->
// STOP -> RUNNING, over real sockets; the data arrives exactly.
func TestMigrationSourceToDestination(t *testing.T) {
	const maxXfer = 16 << 10
	blob := migrationBlob(100<<10 + 123)
	src, srcDev := startMigServer(t, fakeMigFlags, blob, 40<<10, maxXfer)
	c := dial(t, src.path)

	for _, f := range []uint32{FeatureMigration, FeatureMigDeviceState, FeatureMigDataSize} {
		if err := c.ProbeFeature(f); err != nil {
			t.Errorf("probe feature %d: %v", f, err)
		}
	}
	if flags, err := c.MigrationFlags(); err != nil || flags != fakeMigFlags {
		t.Fatalf("migration flags %#x, %v", flags, err)
	}
	expectMigState(t, c, MigStateRunning)
	if n, err := c.MigDataSize(); err != nil || n != uint64(len(blob)) {
		t.Fatalf("mig data size %d, %v", n, err)
	}

	if err := c.SetMigState(MigStatePreCopy); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for _, size := range []uint32{100, maxXfer} { // the second needs several device reads
		data, err := c.MigDataRead(size)
		if err != nil || len(data) != int(size) {
			t.Fatalf("pre-copy read of %d: %d bytes, %v", size, len(data), err)
		}
		got = append(got, data...)
	}
	if err := c.SetMigState(MigStateStopCopy); err != nil {
		t.Fatal(err)
	}
	for {
		data, err := c.MigDataRead(maxXfer)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, data...)
		if len(data) < maxXfer {
			break
		}
	}
	if data, err := c.MigDataRead(maxXfer); err != nil || len(data) != 0 {
		t.Fatalf("read after the end: %d bytes, %v", len(data), err)
	}
	if err := c.SetMigState(MigStateStop); err != nil {
		t.Fatal(err)
	}
	expectHops(t, srcDev, "RUNNING>PRE_COPY PRE_COPY>STOP_COPY STOP_COPY>STOP")
	if !bytes.Equal(got, blob) {
		t.Fatalf("source gave %d bytes, not the device's %d", len(got), len(blob))
	}

	dst, dstDev := startMigServer(t, fakeMigFlags, nil, 0, maxXfer)
	d := dial(t, dst.path)
	if err := d.SetMigState(MigStateResuming); err != nil {
		t.Fatal(err)
	}
	expectHops(t, dstDev, "RUNNING>STOP STOP>RESUMING")
	if err := d.MigDataWrite(got); err != nil {
		t.Fatal(err)
	}
	if err := d.SetMigState(MigStateStop); err != nil {
		t.Fatal(err)
	}
	if err := d.SetMigState(MigStateRunning); err != nil {
		t.Fatal(err)
	}
	expectHops(t, dstDev, "RESUMING>STOP STOP>RUNNING")
	if !bytes.Equal(dstDev.loadedData(), blob) {
		t.Fatalf("destination loaded %d bytes, not the source's %d", len(dstDev.loadedData()), len(blob))
	}
	if st, ok := dst.srv.MigState(); !ok || st != MigStateRunning {
		t.Fatalf("Server.MigState %s, %v", st, ok)
	}
}

// TestSaveLoadDevice moves a device's data with SaveDevice and LoadDevice:
// with pre-copy from RUNNING, straight to STOP_COPY from STOP or without
// PRE_COPY.
func TestSaveLoadDevice(t *testing.T) {
	blob := migrationBlob(50<<10 + 5)
	for _, tc := range []struct {
		name  string
		flags uint64
		start MigState
		arcs  string
	}{
		{"running with pre-copy", fakeMigFlags, MigStateRunning, "RUNNING>PRE_COPY PRE_COPY>STOP_COPY STOP_COPY>STOP"},
		{"stopped", fakeMigFlags, MigStateStop, "STOP>STOP_COPY STOP_COPY>STOP"},
		{"no pre-copy", MigrationStopCopy, MigStateRunning, "RUNNING>STOP STOP>STOP_COPY STOP_COPY>STOP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, srcDev := startMigServer(t, tc.flags, blob, 20<<10, 8<<10)
			c := dial(t, src.path)
			if err := c.SetMigState(tc.start); err != nil {
				t.Fatal(err)
			}
			srcDev.takeHops(t)
			var stream bytes.Buffer
			if err := c.SaveDevice(&stream); err != nil {
				t.Fatal(err)
			}
			expectHops(t, srcDev, tc.arcs)
			expectMigState(t, c, MigStateStop)

			dst, dstDev := startMigServer(t, tc.flags, nil, 0, 4<<10)
			d := dial(t, dst.path)
			if err := d.LoadDevice(&stream); err != nil {
				t.Fatal(err)
			}
			expectHops(t, dstDev, "RUNNING>STOP STOP>RESUMING RESUMING>STOP")
			expectMigState(t, d, MigStateStop)
			if !bytes.Equal(dstDev.loadedData(), blob) {
				t.Fatalf("destination loaded %d bytes, want %d", len(dstDev.loadedData()), len(blob))
			}
		})
	}
}

// TestSaveDeviceRollsBack fails the stop-copy arc: SaveDevice reports it and
// returns the source to RUNNING.
func TestSaveDeviceRollsBack(t *testing.T) {
	src, dev := startMigServer(t, fakeMigFlags, migrationBlob(1000), 100, 0)
	dev.mu.Lock()
	dev.failArc, dev.failErr = [2]MigState{MigStatePreCopy, MigStateStopCopy}, unix.EBUSY
	dev.mu.Unlock()
	c := dial(t, src.path)
	expectErrno(t, "save with a failing arc", c.SaveDevice(io.Discard), unix.EBUSY)
	expectHops(t, dev, "RUNNING>PRE_COPY PRE_COPY>RUNNING")
	expectMigState(t, c, MigStateRunning)
}

// TestMigrationIllegalRequests asks for refused transitions and for data in
// the wrong states: each gets EINVAL and changes nothing.
func TestMigrationIllegalRequests(t *testing.T) {
	ts, dev := startMigServer(t, fakeMigFlags, migrationBlob(100), 10, 0)
	c := dial(t, ts.path)
	refuse := func(state MigState) {
		t.Helper()
		for _, target := range []MigState{MigStateError, MigStateRunningP2P, MigStatePreCopyP2P, 8, 0xabcd} {
			expectErrno(t, fmt.Sprintf("%s -> %s", state, target), c.SetMigState(target), unix.EINVAL)
		}
		if !state.saving() {
			_, err := c.MigDataRead(16)
			expectErrno(t, "MIG_DATA_READ in "+state.String(), err, unix.EINVAL)
		}
		if state != MigStateResuming {
			expectErrno(t, "MIG_DATA_WRITE in "+state.String(), c.MigDataWrite([]byte{1}), unix.EINVAL)
		}
		expectMigState(t, c, state)
		expectHops(t, dev, "")
	}
	refuse(MigStateRunning)
	for _, step := range []struct {
		to   MigState
		arcs string
	}{
		{MigStateStop, "RUNNING>STOP"},
		{MigStateResuming, "STOP>RESUMING"},
		{MigStateStopCopy, "RESUMING>STOP STOP>STOP_COPY"},
		{MigStateRunning, "STOP_COPY>STOP STOP>RUNNING"},
		{MigStatePreCopy, "RUNNING>PRE_COPY"},
	} {
		if err := c.SetMigState(step.to); err != nil {
			t.Fatal(err)
		}
		expectHops(t, dev, step.arcs)
		refuse(step.to)
	}
	if err := c.SetMigState(MigStateStopCopy); err != nil {
		t.Fatal(err)
	}
	expectHops(t, dev, "PRE_COPY>STOP_COPY")
	expectErrno(t, "STOP_COPY -> PRE_COPY", c.SetMigState(MigStatePreCopy), unix.EINVAL)
	refuse(MigStateStopCopy)
	// Asking for the current state is no arc at all.
	if err := c.SetMigState(MigStateStopCopy); err != nil {
		t.Fatal(err)
	}
	expectHops(t, dev, "")
}

// TestMigrationFailingArc: a failing arc leaves the state where the last
// good arc ended; a device that lost its state puts the FSM in ERROR, which
// refuses everything until DEVICE_RESET returns it to RUNNING.
func TestMigrationFailingArc(t *testing.T) {
	ts, dev := startMigServer(t, fakeMigFlags, migrationBlob(100), 10, 0)
	c := dial(t, ts.path)

	dev.mu.Lock()
	dev.failArc, dev.failErr = [2]MigState{MigStateStop, MigStateStopCopy}, unix.EBUSY
	dev.mu.Unlock()
	expectErrno(t, "RUNNING -> STOP_COPY failing at STOP", c.SetMigState(MigStateStopCopy), unix.EBUSY)
	expectMigState(t, c, MigStateStop)
	expectHops(t, dev, "RUNNING>STOP")

	// A refused resume stays in RESUMING (the device did not say it broke).
	dev.mu.Lock()
	dev.failArc, dev.reject = [2]MigState{}, true
	dev.mu.Unlock()
	if err := c.SetMigState(MigStateResuming); err != nil {
		t.Fatal(err)
	}
	expectErrno(t, "RESUMING -> STOP with bad data", c.SetMigState(MigStateRunning), unix.EILSEQ)
	expectMigState(t, c, MigStateResuming)
	expectHops(t, dev, "STOP>RESUMING")

	dev.mu.Lock()
	dev.reject = false
	dev.failArc, dev.failErr = [2]MigState{MigStateRunning, MigStatePreCopy}, fmt.Errorf("fake: engine gone: %w", ErrMigStateLost)
	dev.mu.Unlock()
	expectErrno(t, "arc that loses the state", c.SetMigState(MigStatePreCopy), unix.EIO)
	expectMigState(t, c, MigStateError)
	expectHops(t, dev, "RESUMING>STOP STOP>RUNNING")
	for _, target := range []MigState{MigStateRunning, MigStateStop, MigStateError, MigStateResuming} {
		expectErrno(t, "leaving ERROR to "+target.String(), c.SetMigState(target), unix.EINVAL)
	}
	_, err := c.MigDataRead(8)
	expectErrno(t, "MIG_DATA_READ in ERROR", err, unix.EINVAL)
	expectErrno(t, "MIG_DATA_WRITE in ERROR", c.MigDataWrite([]byte{1}), unix.EINVAL)
	expectMigState(t, c, MigStateError)

	if err := c.Reset(); err != nil {
		t.Fatal(err)
	}
	expectMigState(t, c, MigStateRunning)
	dev.mu.Lock()
	dev.failArc = [2]MigState{}
	dev.mu.Unlock()
	if err := c.SetMigState(MigStatePreCopy); err != nil {
		t.Fatal(err)
	}
	expectHops(t, dev, "RUNNING>PRE_COPY")

	// A read that loses the state also ends in ERROR.
	dev.mu.Lock()
	dev.readErr = ErrMigStateLost
	dev.mu.Unlock()
	_, err = c.MigDataRead(8)
	expectErrno(t, "read that loses the state", err, unix.EIO)
	expectMigState(t, c, MigStateError)
}

// TestMigrationStateSurvivesReconnect: the device keeps its migration state
// when the client goes away.
func TestMigrationStateSurvivesReconnect(t *testing.T) {
	ts, _ := startMigServer(t, fakeMigFlags, nil, 0, 0)
	c := dial(t, ts.path)
	if err := c.SetMigState(MigStateStop); err != nil {
		t.Fatal(err)
	}
	c.Close()
	expectMigState(t, dial(t, ts.path), MigStateStop)
}

// TestMigrationP2PLeftOut: a device that claims P2P is offered without it,
// and its arcs skip the P2P states.
func TestMigrationP2PLeftOut(t *testing.T) {
	ts, dev := startMigServer(t, MigrationStopCopy|MigrationP2P|MigrationPreCopy, nil, 0, 0)
	c := dial(t, ts.path)
	if flags, err := c.MigrationFlags(); err != nil || flags != fakeMigFlags {
		t.Fatalf("flags %#x, %v", flags, err)
	}
	expectErrno(t, "to RUNNING_P2P", c.SetMigState(MigStateRunningP2P), unix.EINVAL)
	if err := c.SetMigState(MigStateStop); err != nil {
		t.Fatal(err)
	}
	expectHops(t, dev, "RUNNING>STOP")
}

// TestMigrationUnsupported: a device that is not a Migrator answers
// ENOTSUP to everything about migration.
func TestMigrationUnsupported(t *testing.T) {
	ts := startServer(t, 0)
	c := dial(t, ts.path)
	expectErrno(t, "probe", c.ProbeFeature(FeatureMigration), unix.ENOTSUP)
	_, err := c.MigrationFlags()
	expectErrno(t, "flags", err, unix.ENOTSUP)
	expectErrno(t, "set state", c.SetMigState(MigStateStop), unix.ENOTSUP)
	_, err = c.MigDataRead(8)
	expectErrno(t, "read", err, unix.ENOTSUP)
	expectErrno(t, "write", c.MigDataWrite([]byte{1}), unix.ENOTSUP)
	expectErrno(t, "save", c.SaveDevice(io.Discard), unix.ENOTSUP)
	if _, ok := ts.srv.MigState(); ok {
		t.Fatal("Server.MigState ok for a device that does not migrate")
	}
}

// TestDeviceFeatureMalformed sends malformed DEVICE_FEATURE and MIG_DATA_*
// messages by hand; each gets the errno the specification or linux/vfio.h
// implies, the state does not move, and the server goes on serving.
func TestDeviceFeatureMalformed(t *testing.T) {
	const maxXfer = 4096
	ts, dev := startMigServer(t, fakeMigFlags, migrationBlob(100), 10, maxXfer)
	r := dialRaw(t, ts.path)
	r.command(1, CmdVersion, 0, encodeVersion(VersionMsg{}, clientCaps))
	r.expectOK("VERSION", 1)
	feat := func(argsz, flags uint32, data ...byte) []byte {
		return append(DeviceFeatureMsg{Argsz: argsz, Flags: flags}.Append(nil), data...)
	}
	state := func(s MigState) []byte { return MigStateFeature{DeviceState: uint32(s), DataFD: -1}.Append(nil) }
	get, set, probe := DeviceFeatureGet, DeviceFeatureSet, DeviceFeatureProbe

	for i, tc := range []struct {
		name    string
		cmd     uint16
		payload []byte
		errno   unix.Errno
	}{
		{"short feature", CmdDeviceFeature, []byte{16, 0, 0, 0}, unix.EINVAL},
		{"feature argsz 4", CmdDeviceFeature, feat(4, FeatureMigration|get), unix.EINVAL},
		{"unknown flag bit", CmdDeviceFeature, feat(16, FeatureMigration|get|1<<19), unix.EINVAL},
		{"no GET/SET/PROBE", CmdDeviceFeature, feat(16, FeatureMigration), unix.EINVAL},
		{"GET and SET", CmdDeviceFeature, feat(16, FeatureMigDeviceState|get|set, state(MigStateStop)...), unix.EINVAL},
		{"unknown feature", CmdDeviceFeature, feat(64, 77|get), unix.ENOTSUP},
		{"feature 0", CmdDeviceFeature, feat(64, 0|probe), unix.ENOTSUP},
		{"DMA logging start", CmdDeviceFeature, feat(64, FeatureDMALoggingStart|set, make([]byte, 16)...), unix.ENOTSUP},
		{"DMA logging probe", CmdDeviceFeature, feat(8, FeatureDMALoggingStop|probe), unix.ENOTSUP},
		{"DMA logging report", CmdDeviceFeature, feat(64, FeatureDMALoggingRep|get, make([]byte, 24)...), unix.ENOTSUP},
		{"SET MIGRATION", CmdDeviceFeature, feat(16, FeatureMigration|set, make([]byte, 8)...), unix.EINVAL},
		{"PROBE SET MIGRATION", CmdDeviceFeature, feat(8, FeatureMigration|probe|set), unix.EINVAL},
		{"PROBE SET DATA_SIZE", CmdDeviceFeature, feat(8, FeatureMigDataSize|probe|set), unix.EINVAL},
		{"GET MIGRATION argsz 8", CmdDeviceFeature, feat(8, FeatureMigration|get), unix.EINVAL},
		{"GET state argsz 12", CmdDeviceFeature, feat(12, FeatureMigDeviceState|get), unix.EINVAL},
		{"SET state without data", CmdDeviceFeature, feat(16, FeatureMigDeviceState|set), unix.EINVAL},
		{"SET state half data", CmdDeviceFeature, feat(16, FeatureMigDeviceState|set, 1, 0, 0, 0), unix.EINVAL},
		{"SET state argsz 8", CmdDeviceFeature, feat(8, FeatureMigDeviceState|set, state(MigStateStop)...), unix.EINVAL},
		{"SET state 99", CmdDeviceFeature, feat(16, FeatureMigDeviceState|set, state(99)...), unix.EINVAL},
		{"SET state ERROR", CmdDeviceFeature, feat(16, FeatureMigDeviceState|set, state(MigStateError)...), unix.EINVAL},
		{"short read", CmdMigDataRead, []byte{8, 0, 0, 0}, unix.EINVAL},
		{"read argsz 4", CmdMigDataRead, MigDataMsg{Argsz: 4, Size: 0}.Append(nil), unix.EINVAL},
		{"read argsz below size", CmdMigDataRead, MigDataMsg{Argsz: 8, Size: 16}.Append(nil), unix.EINVAL},
		{"read above max_data_xfer_size", CmdMigDataRead, MigDataMsg{Argsz: 1 << 20, Size: maxXfer + 1}.Append(nil), unix.E2BIG},
		{"read in RUNNING", CmdMigDataRead, MigDataMsg{Argsz: 24, Size: 16}.Append(nil), unix.EINVAL},
		{"short write", CmdMigDataWrite, []byte{8, 0}, unix.EINVAL},
		{"write argsz 4", CmdMigDataWrite, append(MigDataMsg{Argsz: 4, Size: 1}.Append(nil), 1), unix.EINVAL},
		{"write size above data", CmdMigDataWrite, append(MigDataMsg{Argsz: 18, Size: 10}.Append(nil), 1, 2), unix.EINVAL},
		{"write size below data", CmdMigDataWrite, append(MigDataMsg{Argsz: 18, Size: 1}.Append(nil), 1, 2), unix.EINVAL},
		{"write above max_data_xfer_size", CmdMigDataWrite, append(MigDataMsg{Argsz: 8 + maxXfer + 1, Size: maxXfer + 1}.Append(nil), make([]byte, maxXfer+1)...), unix.E2BIG},
		{"write in RUNNING", CmdMigDataWrite, append(MigDataMsg{Argsz: 9, Size: 1}.Append(nil), 1), unix.EINVAL},
	} {
		id := uint16(10 + i)
		r.command(id, tc.cmd, 0, tc.payload)
		r.expectError(tc.name, id, tc.errno)
	}
	expectHops(t, dev, "")

	// Well-formed requests, checked byte for byte.
	probeMig := feat(8, FeatureMigration|probe|get)
	r.command(60, CmdDeviceFeature, 0, probeMig)
	if m := r.expectOK("PROBE GET MIGRATION", 60); !bytes.Equal(m.payload, probeMig) {
		t.Errorf("probe reply % x, want the request % x", m.payload, probeMig)
	}
	r.command(61, CmdDeviceFeature, 0, feat(64, FeatureMigration|get))
	if m := r.expectOK("GET MIGRATION", 61); !bytes.Equal(m.payload, feat(16, FeatureMigration|get, MigrationFeature{Flags: fakeMigFlags}.Append(nil)...)) {
		t.Errorf("GET MIGRATION reply % x", m.payload)
	}
	setStop := feat(16, FeatureMigDeviceState|set, state(MigStateStop)...)
	r.command(62, CmdDeviceFeature, 0, setStop)
	if m := r.expectOK("SET STOP", 62); !bytes.Equal(m.payload, setStop) {
		t.Errorf("SET reply % x, want the request % x", m.payload, setStop)
	}
	expectHops(t, dev, "RUNNING>STOP")
	r.command(63, CmdDeviceFeature, 0, feat(16, FeatureMigDeviceState|get))
	if m := r.expectOK("GET state", 63); !bytes.Equal(m.payload, feat(16, FeatureMigDeviceState|get, state(MigStateStop)...)) {
		t.Errorf("GET state reply % x", m.payload)
	}
	r.command(64, CmdDeviceFeature, 0, feat(16, FeatureMigDataSize|get))
	if m := r.expectOK("GET data size", 64); !bytes.Equal(m.payload, feat(16, FeatureMigDataSize|get, MigDataSizeFeature{StopCopyLength: 100}.Append(nil)...)) {
		t.Errorf("GET data size reply % x", m.payload)
	}
	r.command(65, CmdDeviceFeature, 0, feat(16, FeatureMigDeviceState|set, state(MigStateStopCopy)...))
	r.expectOK("SET STOP_COPY", 65)
	r.command(66, CmdMigDataRead, 0, MigDataMsg{Argsz: 8 + 64, Size: 64}.Append(nil))
	m := r.expectOK("MIG_DATA_READ in STOP_COPY", 66)
	if want := append(MigDataMsg{Argsz: 8 + 64, Size: 64}.Append(nil), migrationBlob(64)...); !bytes.Equal(m.payload, want) {
		t.Errorf("read reply % x, want % x", m.payload, want)
	}
	r.command(67, CmdMigDataRead, 0, MigDataMsg{Argsz: 8 + 64, Size: 64}.Append(nil))
	m = r.expectOK("MIG_DATA_READ to the end", 67)
	if want := append(MigDataMsg{Argsz: 8 + 36, Size: 36}.Append(nil), migrationBlob(100)[64:]...); !bytes.Equal(m.payload, want) {
		t.Errorf("short read reply % x, want % x", m.payload, want)
	}
	expectHops(t, dev, "STOP>STOP_COPY")
}
