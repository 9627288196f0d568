package cudadrv

import (
	"bytes"
	"testing"

	"github.com/gmig-dev/gmig/abi"
)

// TestHostMemory: host memory the library allocates is page-aligned,
// copies to and from device memory like any host buffer, has no device
// address, and is freed once.
func TestHostMemory(t *testing.T) {
	l := initLib(t)
	_, r := l.MemHostAlloc(thread+1, 4096, 0)
	want(t, "cuMemAllocHost without a context", r, ErrInvalidContext)
	src, r := l.MemHostAlloc(thread, 10000, 0)
	must(t, r)
	dst, r := l.MemHostAlloc(thread, 10000, hostAllocPortable|hostAllocWriteCombined)
	must(t, r)
	for _, b := range [][]byte{src, dst} {
		if len(b) != 10000 || addressOf(b)%abi.PageSize != 0 {
			t.Fatalf("host allocation of %d bytes at %#x, want 10000 page-aligned", len(b), addressOf(b))
		}
	}
	copy(src, pattern(10000, 5))
	a, r := l.MemAlloc(thread, 10000)
	must(t, r)
	must(t, l.MemcpyHtoD(thread, a, src))
	must(t, l.MemcpyDtoH(thread, dst, a))
	if !bytes.Equal(src, dst) {
		t.Fatal("host memory → device → host memory: bytes differ")
	}
	_, r = l.MemHostGetDevicePointer(thread, addressOf(src)+8, 0)
	want(t, "cuMemHostGetDevicePointer of host memory", r, ErrNotSupported)
	_, r = l.MemHostGetDevicePointer(thread, addressOf(src), 1)
	want(t, "cuMemHostGetDevicePointer with flags", r, ErrInvalidValue)
	_, r = l.MemHostGetDevicePointer(thread, 0x1000, 0)
	want(t, "cuMemHostGetDevicePointer of other memory", r, ErrInvalidValue)
	_, r = l.MemHostAlloc(thread, 4096, hostAllocDeviceMap)
	want(t, "cuMemHostAlloc(CU_MEMHOSTALLOC_DEVICEMAP)", r, ErrNotSupported)
	_, r = l.MemHostAlloc(thread, 4096, 0x80)
	want(t, "cuMemHostAlloc with unknown flags", r, ErrInvalidValue)
	_, r = l.MemHostAlloc(thread, 0, 0)
	want(t, "cuMemHostAlloc(0)", r, ErrInvalidValue)
	must(t, l.MemFreeHost(addressOf(src)))
	want(t, "cuMemFreeHost twice", l.MemFreeHost(addressOf(src)), ErrInvalidValue)
	want(t, "cuMemFreeHost of an inner pointer", l.MemFreeHost(addressOf(dst)+1), ErrInvalidValue)
	must(t, l.MemFreeHost(addressOf(dst)))
}

func TestCtxGetAPIVersion(t *testing.T) {
	l := initLib(t)
	if v, r := l.CtxGetAPIVersion(thread, 0); r != Success || v != 3020 {
		t.Fatalf("cuCtxGetApiVersion(NULL) = %d, %v; want 3020", v, r)
	}
	_, r := l.CtxGetAPIVersion(thread, 0x9999)
	want(t, "cuCtxGetApiVersion of no context", r, ErrInvalidContext)
	_, r = l.CtxGetAPIVersion(thread+1, 0)
	want(t, "cuCtxGetApiVersion without a current context", r, ErrInvalidContext)
}
