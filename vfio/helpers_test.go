package vfio

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// Regions of fakeDevice.
const (
	fakeRegsIndex   = PCIBAR0RegionIndex // 4 KiB of plain registers, trapped
	fakeApertureIdx = 2                  // 64 KiB memfd, mmap-able whole
	fakeSparseIdx   = 3                  // 16 KiB memfd, second page mmap-able
	fakeRegsSize    = 4096
	fakeApertureSz  = 64 << 10
	fakeSparseSz    = 16 << 10
	fakeConfigSize  = 256
)

// fakeDevice is a small Device: BAR0 registers in memory, two memfd-backed
// BARs (one sparse), config space, INTx and MSI.
type fakeDevice struct {
	mu       sync.Mutex
	regs     [fakeRegsSize]byte
	config   [fakeConfigSize]byte
	aperture *os.File
	sparse   *os.File
	resets   int
}

func newFakeDevice(tb testing.TB) *fakeDevice {
	d := &fakeDevice{aperture: memfd(tb, fakeApertureSz), sparse: memfd(tb, fakeSparseSz)}
	d.config[0], d.config[1] = 0x86, 0x80
	return d
}

func (d *fakeDevice) Info() DeviceInfo {
	return DeviceInfo{Flags: DeviceFlagReset | DeviceFlagPCI, NumRegions: PCINumRegions, NumIRQs: PCINumIRQs}
}

func (d *fakeDevice) RegionInfo(index uint32) (RegionInfo, error) {
	rw := uint32(RegionFlagRead | RegionFlagWrite)
	switch index {
	case fakeRegsIndex:
		return RegionInfo{Flags: rw, Size: fakeRegsSize}, nil
	case fakeApertureIdx:
		return RegionInfo{Flags: rw, Size: fakeApertureSz, File: d.aperture}, nil
	case fakeSparseIdx:
		return RegionInfo{Flags: rw, Size: fakeSparseSz, File: d.sparse, Sparse: []SparseArea{{Offset: 4096, Size: 4096}}}, nil
	case PCIConfigRegionIndex:
		return RegionInfo{Flags: rw, Size: fakeConfigSize}, nil
	case 1, 4, 5, PCIROMRegionIndex, PCIVGARegionIndex:
		return RegionInfo{}, nil
	}
	return RegionInfo{}, unix.EINVAL
}

func (d *fakeDevice) IRQInfo(index uint32) (IRQInfo, error) {
	switch index {
	case PCIINTxIRQIndex:
		return IRQInfo{Flags: IRQInfoFlagEventfd | IRQInfoFlagMaskable | IRQInfoFlagAutomasked, Count: 1}, nil
	case PCIMSIIRQIndex:
		return IRQInfo{Flags: IRQInfoFlagEventfd | IRQInfoFlagNoResize, Count: 1}, nil
	case PCIMSIXIRQIndex, PCIErrIRQIndex, PCIReqIRQIndex:
		return IRQInfo{}, nil
	}
	return IRQInfo{}, unix.EINVAL
}

func (d *fakeDevice) access(index uint32, offset uint64, p []byte, write bool) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	var mem []byte
	var file *os.File
	var size uint64
	switch index {
	case fakeRegsIndex:
		mem, size = d.regs[:], fakeRegsSize
	case PCIConfigRegionIndex:
		mem, size = d.config[:], fakeConfigSize
	case fakeApertureIdx:
		file, size = d.aperture, fakeApertureSz
	case fakeSparseIdx:
		file, size = d.sparse, fakeSparseSz
	default:
		return unix.EINVAL
	}
	if offset > size || uint64(len(p)) > size-offset {
		return unix.EINVAL
	}
	switch {
	case mem != nil && write:
		copy(mem[offset:], p)
	case mem != nil:
		copy(p, mem[offset:])
	case write:
		_, err := file.WriteAt(p, int64(offset))
		return err
	default:
		_, err := file.ReadAt(p, int64(offset))
		return err
	}
	return nil
}

func (d *fakeDevice) ReadRegion(index uint32, offset uint64, p []byte) error {
	return d.access(index, offset, p, false)
}

func (d *fakeDevice) WriteRegion(index uint32, offset uint64, p []byte) error {
	return d.access(index, offset, p, true)
}

func (d *fakeDevice) Reset() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.resets++
	clear(d.regs[:])
	return nil
}

func (d *fakeDevice) resetCount() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.resets
}

func (d *fakeDevice) reg32(off int) uint32 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return ne.Uint32(d.regs[off:])
}

func memfd(tb testing.TB, size int64) *os.File {
	tb.Helper()
	fd, err := unix.MemfdCreate("vfio-test", unix.MFD_CLOEXEC)
	if err != nil {
		tb.Fatalf("memfd_create: %v", err)
	}
	f := os.NewFile(uintptr(fd), "memfd")
	if err := f.Truncate(size); err != nil {
		tb.Fatalf("truncate memfd: %v", err)
	}
	tb.Cleanup(func() { f.Close() })
	return f
}

// eventfd returns a non-blocking eventfd; the test owns it unless handed
// over (then the caller passes a dup, see dupFile).
func eventfd(tb testing.TB) *os.File {
	tb.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		tb.Fatalf("eventfd: %v", err)
	}
	f := os.NewFile(uintptr(fd), "eventfd")
	tb.Cleanup(func() { f.Close() })
	return f
}

// dupFile returns a new descriptor for f's file, for handing to an owner
// that will close it.
func dupFile(tb testing.TB, f *os.File) *os.File {
	tb.Helper()
	fd, err := rawFD(f)
	if err != nil {
		tb.Fatal(err)
	}
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		tb.Fatalf("dup: %v", err)
	}
	return os.NewFile(uintptr(nfd), f.Name()+"-dup")
}

// pollCount reads an eventfd's counter without waiting: 0 if unsignalled.
func pollCount(tb testing.TB, f *os.File) uint64 {
	tb.Helper()
	fd, err := rawFD(f)
	if err != nil {
		tb.Fatal(err)
	}
	var buf [8]byte
	n, err := unix.Read(fd, buf[:])
	if errors.Is(err, unix.EAGAIN) {
		return 0
	}
	if err != nil || n != 8 {
		tb.Fatalf("reading eventfd: n=%d err=%v", n, err)
	}
	return ne.Uint64(buf[:])
}

// waitCount blocks until the eventfd is signalled (or fails the test after a
// generous timeout) and returns its counter.
func waitCount(tb testing.TB, f *os.File) uint64 {
	tb.Helper()
	if err := f.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
		tb.Fatalf("eventfd deadline: %v", err)
	}
	var buf [8]byte
	if _, err := f.Read(buf[:]); err != nil {
		tb.Fatalf("waiting for eventfd: %v", err)
	}
	return ne.Uint64(buf[:])
}

// signal writes 1 to an eventfd (the client's side of an unmask).
func signal(tb testing.TB, f *os.File) {
	tb.Helper()
	if _, err := f.Write(ne.AppendUint64(nil, 1)); err != nil {
		tb.Fatalf("writing eventfd: %v", err)
	}
}

type testServer struct {
	path string
	srv  *Server
	dev  *fakeDevice
	logs *logLines // the server's log, also sent to the test's log
}

// startServer serves a fake device on a socket in a temporary directory
// until the test ends.
func startServer(t testing.TB, maxXfer uint32) *testServer {
	t.Helper()
	return startServerWith(t, ServerConfig{MaxDataXfer: maxXfer})
}

// startServerWith serves a fake device with cfg (its Device and Log are
// filled in).
func startServerWith(t testing.TB, cfg ServerConfig) *testServer {
	t.Helper()
	dev := newFakeDevice(t)
	cfg.Device = dev
	ts := startServerConfig(t, cfg)
	ts.dev = dev
	return ts
}

// startServerFor serves dev (ts.dev stays nil unless the caller sets it).
func startServerFor(t testing.TB, dev Device, maxXfer uint32) *testServer {
	t.Helper()
	return startServerConfig(t, ServerConfig{Device: dev, MaxDataXfer: maxXfer})
}

// startServerConfig serves cfg.Device with cfg, its Log set to one that
// the test reads back.
func startServerConfig(t testing.TB, cfg ServerConfig) *testServer {
	t.Helper()
	ts := &testServer{path: filepath.Join(t.TempDir(), "vfio.sock"), logs: &logLines{}}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: ts.path, Net: "unix"})
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	cfg.Log = zerolog.New(io.MultiWriter(zerolog.NewTestWriter(t), ts.logs)).Level(zerolog.DebugLevel)
	ts.srv = NewServer(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ts.srv.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Serve returned %v, want context.Canceled", err)
		}
		l.Close()
	})
	return ts
}

// logLines keeps JSON log lines, safe for concurrent use.
type logLines struct {
	mu    sync.Mutex
	lines [][]byte
}

func (l *logLines) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, bytes.Clone(p))
	return len(p), nil
}

// withMessage returns the decoded lines whose message is msg.
func (l *logLines) withMessage(tb testing.TB, msg string) []map[string]any {
	tb.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, b := range l.lines {
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			tb.Fatalf("log line %q: %v", b, err)
		}
		if m["message"] == msg {
			out = append(out, m)
		}
	}
	return out
}

func dial(t *testing.T, path string) *Client {
	t.Helper()
	c, err := Dial(path)
	if err != nil {
		t.Fatalf("Dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// openFDs counts this process's open descriptors.
func openFDs(tb testing.TB) int {
	tb.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		tb.Fatalf("listing fds: %v", err)
	}
	return len(ents)
}
