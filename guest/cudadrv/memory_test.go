package cudadrv

import (
	"bytes"
	"testing"

	"github.com/gmig-dev/gmig/abi"
)

func pattern(n int, seed byte) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte(i*7) + seed
	}
	return p
}

func TestCopies(t *testing.T) {
	l := initLib(t)
	const n = 3*4096 + 5
	a, r := l.MemAlloc(thread, n)
	must(t, r)
	b, r := l.MemAlloc(thread, n)
	must(t, r)
	src := pattern(n, 1)
	must(t, l.MemcpyHtoD(thread, a, src))
	// Device to device, async then a host copy that must see it.
	must(t, l.MemcpyDtoD(thread, b, a+1, n-1, 0, true))
	got := make([]byte, n-1)
	must(t, l.MemcpyDtoH(thread, got, b))
	if !bytes.Equal(got, src[1:]) {
		t.Fatal("cuMemcpyDtoDAsync then cuMemcpyDtoH: bytes differ")
	}
	must(t, l.MemcpyDtoD(thread, a, b, 16, 0, false))
	must(t, l.MemcpyDtoH(thread, got[:16], a))
	if !bytes.Equal(got[:16], src[1:17]) {
		t.Fatal("cuMemcpyDtoD: bytes differ")
	}
	want(t, "cuMemcpyHtoD past the allocation", l.MemcpyHtoD(thread, a+1, src), ErrInvalidValue)
	want(t, "cuMemcpyDtoH from no allocation", l.MemcpyDtoH(thread, got, 1<<40), ErrInvalidValue)
	want(t, "cuMemcpyDtoD on a bad stream", l.MemcpyDtoD(thread, a, b, 1, 0x9999, true), ErrInvalidHandle)
	// What failed left the memory as it was.
	must(t, l.MemcpyDtoH(thread, got[:16], a+16))
	if !bytes.Equal(got[:16], src[16:32]) {
		t.Fatal("a refused copy changed memory")
	}
}

func TestAllocFree(t *testing.T) {
	l := initLib(t)
	_, r := l.MemAlloc(thread, 0)
	want(t, "cuMemAlloc(0)", r, ErrInvalidValue)
	_, r = l.MemAlloc(thread, 1<<40)
	want(t, "cuMemAlloc(1 TiB)", r, ErrOutOfMemory)
	a, r := l.MemAlloc(thread, 10000)
	must(t, r)
	if base, size, r := l.MemGetAddressRange(thread, a+9999); r != Success || base != a || size != 10000 {
		t.Fatalf("cuMemGetAddressRange = %#x %d %v", base, size, r)
	}
	want(t, "cuMemFree of an inner pointer", l.MemFree(thread, a+8), ErrInvalidValue)
	must(t, l.MemFree(thread, a))
	want(t, "cuMemFree twice", l.MemFree(thread, a), ErrInvalidValue)
}

func TestMemset(t *testing.T) {
	l := initLib(t)
	const n = 4096
	a, r := l.MemAlloc(thread, n)
	must(t, r)
	ref := pattern(n, 9)
	must(t, l.MemcpyHtoD(thread, a, ref))
	set := func(off int, v uint32, width, count int, async bool) {
		t.Helper()
		must(t, l.Memset(thread, a+uint64(off), v, width, uint64(count), 0, async))
		for i := range width * count {
			ref[off+i] = byte(v >> (8 * (i % width)))
		}
	}
	set(3, 0xab, 1, 1, false)        // one byte
	set(5, 0xcd, 1, 2, false)        // within one word
	set(1, 0x5a, 1, 1001, true)      // unaligned both ends, FILL between
	set(2002, 0xbeef, 2, 333, false) // 16-bit, unaligned start
	set(3000, 0x01020304, 4, 200, true)
	got := make([]byte, n)
	must(t, l.MemcpyDtoH(thread, got, a))
	if i := firstDiff(got, ref); i >= 0 {
		t.Fatalf("byte %d is %#x, want %#x", i, got[i], ref[i])
	}
	want(t, "cuMemsetD16 at an odd address", l.Memset(thread, a+1, 1, 2, 1, 0, false), ErrInvalidValue)
	want(t, "cuMemsetD32 past the allocation", l.Memset(thread, a, 1, 4, n/4+1, 0, false), ErrInvalidValue)
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return -1
}

func TestStreamsAndEvents(t *testing.T) {
	l := initLib(t)
	s, r := l.StreamCreate(thread, streamNonBlocking)
	must(t, r)
	_, r = l.StreamCreate(thread, 0x80)
	want(t, "cuStreamCreate with unknown flags", r, ErrInvalidValue)
	start, r := l.EventCreate(thread, 0)
	must(t, r)
	stop, r := l.EventCreate(thread, 0)
	must(t, r)
	untimed, r := l.EventCreate(thread, eventDisableTiming)
	must(t, r)
	must(t, l.EventQuery(start)) // never recorded: complete
	_, r = l.EventElapsedTime(start, stop)
	want(t, "cuEventElapsedTime of unrecorded events", r, ErrInvalidHandle)

	const n = 1 << 20
	a, r := l.MemAlloc(thread, n)
	must(t, r)
	b, r := l.MemAlloc(thread, n)
	must(t, r)
	must(t, l.EventRecord(thread, start, s))
	must(t, l.EventSynchronize(start)) // its time is taken before the work
	for i := range 8 {
		must(t, l.Memset(thread, a, uint32(i), 4, n/4, s, true))
		must(t, l.MemcpyDtoD(thread, b, a, n, s, true))
	}
	must(t, l.EventRecord(thread, stop, s))
	must(t, l.EventRecord(thread, untimed, s))
	must(t, l.StreamWaitEvent(thread, 0, stop, 0))
	want(t, "cuStreamWaitEvent with unknown flags", l.StreamWaitEvent(thread, 0, stop, 0x10), ErrInvalidValue)
	want(t, "cuStreamWaitEvent of no event", l.StreamWaitEvent(thread, 0, 0x9999, 0), ErrInvalidHandle)
	must(t, l.EventSynchronize(stop))
	must(t, l.EventQuery(stop))
	ms, r := l.EventElapsedTime(start, stop)
	must(t, r)
	if ms <= 0 {
		t.Fatalf("cuEventElapsedTime over 8 MiB of commands = %v ms, want > 0", ms)
	}
	_, r = l.EventElapsedTime(start, untimed)
	want(t, "cuEventElapsedTime with a CU_EVENT_DISABLE_TIMING event", r, ErrInvalidHandle)
	must(t, l.StreamSynchronize(thread, s))
	must(t, l.StreamQuery(thread, s))
	got := make([]byte, 8)
	must(t, l.MemcpyDtoH(thread, got, b+n-8))
	if !bytes.Equal(got, []byte{7, 0, 0, 0, 7, 0, 0, 0}) {
		t.Fatalf("the last memset's copy reads %v", got)
	}
	must(t, l.StreamDestroy(s))
	want(t, "cuStreamSynchronize of a destroyed stream", l.StreamSynchronize(thread, s), ErrInvalidHandle)
	must(t, l.EventDestroy(start))
	want(t, "cuEventQuery of a destroyed event", l.EventQuery(start), ErrInvalidHandle)
}

// TestAsyncWorkIsRungNotWaited: an Async call rings the doorbell (the
// device's RING_TAIL moves) and issues no fence, so nothing waits on it.
func TestAsyncWorkIsRungNotWaited(t *testing.T) {
	l := initLib(t)
	a, r := l.MemAlloc(thread, 1<<20)
	must(t, r)
	must(t, l.CtxSynchronize(thread))
	d := l.Driver()
	tail := func() uint32 {
		v, err := d.Bus().ReadReg32(abi.RegRingTail)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	before, fence := tail(), d.LastFence()
	must(t, l.Memset(thread, a, 7, 4, 1<<18, 0, true))
	if tail() == before {
		t.Fatal("RING_TAIL did not move: the async memset waits for a later call to ring the doorbell")
	}
	must(t, l.MemcpyDtoD(thread, a, a+4096, 4096, 0, true))
	if d.LastFence() != fence {
		t.Fatalf("async calls issued fences %d..%d: they waited for the device", fence, d.LastFence())
	}
	must(t, l.CtxSynchronize(thread))
}
