package cudadrv

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/migtest"
	"github.com/gmig-dev/gmig/internal/sim"
	"github.com/gmig-dev/gmig/vgpu"
)

const testMem = 4 << 20

// thread is the calling thread of the tests' calls.
const thread Thread = 1

// newLib serves a vGPU of cfg and returns a Lib that reaches it over the
// simulator, not yet initialised, and the log it writes.
func newLib(t testing.TB, cfg vgpu.Config) (*Lib, *bytes.Buffer) {
	t.Helper()
	if cfg.MemSize == 0 {
		cfg.MemSize = testMem
	}
	if cfg.Name == "" {
		cfg.Name = "cuda"
	}
	v, err := vgpu.New(cfg, migtest.NewPool(t, 2*(cfg.MemSize+cfg.LocalMemSize)), migtest.Log)
	if err != nil {
		t.Fatal(err)
	}
	s := migtest.Serve(t, v)
	var log bytes.Buffer
	open := func() (guest.Bus, error) {
		b, err := sim.Attach(s.Path, sim.Options{NoIRQ: true})
		if err == nil {
			t.Cleanup(func() { b.Close() })
		}
		return b, err
	}
	return New(Config{Open: open, Log: zerolog.New(&log)}), &log
}

// initLib is newLib on the software back end, initialised, with a
// context current on thread.
func initLib(t testing.TB) *Lib {
	t.Helper()
	l, _ := newLib(t, vgpu.Config{})
	must(t, l.Init(0))
	_, r := l.CtxCreate(thread, 0, 0)
	must(t, r)
	return l
}

func must(t testing.TB, r Result) {
	t.Helper()
	if r != Success {
		t.Fatalf("%v", r.Error())
	}
}

func want(t *testing.T, what string, got, want Result) {
	t.Helper()
	if got != want {
		t.Fatalf("%s = %v, want %v", what, got, want)
	}
}

func TestInitAndDevice(t *testing.T) {
	l, _ := newLib(t, vgpu.Config{})
	_, r := l.DeviceGetCount()
	want(t, "cuDeviceGetCount before cuInit", r, ErrNotInitialized)
	if v := l.DriverGetVersion(); v != 12040 {
		t.Fatalf("cuDriverGetVersion = %d, want 12040", v)
	}
	want(t, "cuInit(1)", l.Init(1), ErrInvalidValue)
	must(t, l.Init(0))
	must(t, l.Init(0))
	n, r := l.DeviceGetCount()
	must(t, r)
	if n != 1 {
		t.Fatalf("cuDeviceGetCount = %d, want 1", n)
	}
	_, r = l.DeviceGet(1)
	want(t, "cuDeviceGet(1)", r, ErrInvalidDevice)
	dev, r := l.DeviceGet(0)
	must(t, r)
	if name, r := l.DeviceGetName(dev); r != Success || name != DeviceName {
		t.Fatalf("cuDeviceGetName = %q, %v", name, r)
	}
	u1, r := l.DeviceGetUUID(dev)
	must(t, r)
	u2, _ := l.DeviceGetUUID(dev)
	if u1 != u2 || u1 == ([16]byte{}) {
		t.Fatalf("cuDeviceGetUuid gave %x then %x", u1, u2)
	}
	total, r := l.DeviceTotalMem(dev)
	must(t, r)
	if total != testMem {
		t.Fatalf("cuDeviceTotalMem = %d, want %d", total, testMem)
	}
	for attr, w := range map[int32]int32{attrMaxThreadsPerBlock: 256, attrWarpSize: 32, attrComputeCapabilityMajor: ComputeMajor, 31: 0} {
		if v, r := l.DeviceGetAttribute(attr, dev); r != Success || v != w {
			t.Fatalf("cuDeviceGetAttribute(%d) = %d, %v, want %d", attr, v, r, w)
		}
	}
	_, r = l.DeviceGetAttribute(attributeMax, dev)
	want(t, "cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_MAX)", r, ErrInvalidValue)
}

func TestInitWithoutDevice(t *testing.T) {
	l := New(Config{Open: func() (guest.Bus, error) { return nil, errors.New("no vGPU here") }, Log: zerolog.Nop()})
	want(t, "cuInit", l.Init(0), ErrNoDevice)
	want(t, "cuInit again", l.Init(0), ErrNoDevice)
	_, r := l.DeviceGetCount()
	want(t, "cuDeviceGetCount", r, ErrNoDevice)
}

func TestContexts(t *testing.T) {
	l, _ := newLib(t, vgpu.Config{})
	must(t, l.Init(0))
	_, r := l.MemAlloc(thread, 4096)
	want(t, "cuMemAlloc without a context", r, ErrInvalidContext)
	if h, r := l.CtxGetCurrent(thread); r != Success || h != 0 {
		t.Fatalf("cuCtxGetCurrent with none = %#x, %v", h, r)
	}
	primary, r := l.DevicePrimaryCtxRetain(0)
	must(t, r)
	if _, active, _ := l.DevicePrimaryCtxGetState(0); !active {
		t.Fatal("the primary context is not active after a retain")
	}
	if h, _ := l.CtxGetCurrent(thread); h != 0 {
		t.Fatal("retaining the primary context made it current")
	}
	must(t, l.CtxSetCurrent(thread, primary))
	free0, total, r := l.MemGetInfo(thread)
	must(t, r)
	created, r := l.CtxCreate(thread, 0, 0)
	must(t, r)
	if h, _ := l.CtxGetCurrent(thread); h != created {
		t.Fatalf("current after cuCtxCreate = %#x, want %#x", h, created)
	}
	if h, _ := l.CtxGetCurrent(thread + 1); h != 0 {
		t.Fatal("another thread sees this thread's context")
	}
	if _, r := l.MemAlloc(thread, 1<<20); r != Success {
		t.Fatal(r)
	}
	if free, _, _ := l.MemGetInfo(thread); free != free0-1<<20 || free > total {
		t.Fatalf("free after a 1 MiB allocation %d, before %d", free, free0)
	}
	popped, r := l.CtxPopCurrent(thread)
	must(t, r)
	if h, _ := l.CtxGetCurrent(thread); popped != created || h != primary {
		t.Fatalf("popped %#x, current %#x; want %#x, %#x", popped, h, created, primary)
	}
	want(t, "cuCtxDestroy of the primary context", l.CtxDestroy(primary), ErrInvalidContext)
	must(t, l.CtxDestroy(created))
	want(t, "cuCtxDestroy twice", l.CtxDestroy(created), ErrInvalidContext)
	if free, _, _ := l.MemGetInfo(thread); free != free0 {
		t.Fatalf("free after destroying the context %d, want %d back", free, free0)
	}
	must(t, l.CtxPushCurrent(thread, primary))
	must(t, l.DevicePrimaryCtxReset(0))
	_, r = l.MemAlloc(thread, 4096)
	want(t, "cuMemAlloc after the primary context's reset", r, ErrInvalidContext)
}

func TestErrorNames(t *testing.T) {
	for r, w := range map[Result][2]string{
		0:   {"CUDA_SUCCESS", "no error"},
		1:   {"CUDA_ERROR_INVALID_VALUE", "invalid argument"},
		2:   {"CUDA_ERROR_OUT_OF_MEMORY", "out of memory"},
		3:   {"CUDA_ERROR_NOT_INITIALIZED", "initialization error"},
		209: {"CUDA_ERROR_NO_BINARY_FOR_GPU", "no kernel image is available for execution on the device"},
		801: {"CUDA_ERROR_NOT_SUPPORTED", "operation not supported"},
		999: {"CUDA_ERROR_UNKNOWN", "unknown error"},
	} {
		n, ok1 := r.Name()
		s, ok2 := r.Text()
		if !ok1 || !ok2 || n != w[0] || s != w[1] {
			t.Errorf("%d: %q %q, want %q %q", r, n, s, w[0], w[1])
		}
	}
	if _, ok := Result(12345).Name(); ok {
		t.Error("a number outside the enum has a name")
	}
}

func TestUnsupportedLoggedOnce(t *testing.T) {
	l, log := newLib(t, vgpu.Config{})
	for range 3 {
		want(t, "cuGraphCreate", l.Unsupported("cuGraphCreate"), ErrNotSupported)
	}
	want(t, "cuArrayCreate_v2", l.Unsupported("cuArrayCreate_v2"), ErrNotSupported)
	if n := strings.Count(log.String(), `"entry_point":"cuGraphCreate"`); n != 1 {
		t.Fatalf("cuGraphCreate logged %d times, want once:\n%s", n, log)
	}
	if !strings.Contains(log.String(), `"entry_point":"cuArrayCreate_v2"`) {
		t.Fatalf("cuArrayCreate_v2 not logged:\n%s", log)
	}
}
