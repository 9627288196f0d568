package cudadrv

import (
	"bytes"
	"testing"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/vgpu"
)

// localSize is the device-local memory of the tests' ABI 1.3 vGPUs.
const localSize = 16 << 20

// localConfig is a software vGPU with device-local memory: CAPS bit 6
// (device addresses) comes with it (ABI 1.3). Its GTT covers the aperture
// and all of local memory.
func localConfig() vgpu.Config {
	return vgpu.Config{LocalMemSize: localSize, GTTEntries: (testMem + localSize) / abi.PageSize}
}

// initLibConfig is initLib on a vGPU of cfg with the Lib's options lc.
func initLibConfig(t testing.TB, cfg vgpu.Config, lc Config) *Lib {
	t.Helper()
	l, _ := newLib(t, cfg)
	l.cfg.DMACopies, l.cfg.RingDelay = lc.DMACopies, lc.RingDelay
	must(t, l.Init(0))
	_, r := l.CtxCreate(thread, 0, 0)
	must(t, r)
	return l
}

// initLocalLib is initLibConfig; it skips, saying why, where the device
// side of ABI 1.3 has not landed (no CAPS bit 6).
func initLocalLib(t testing.TB, cfg vgpu.Config, lc Config) *Lib {
	t.Helper()
	l := initLibConfig(t, cfg, lc)
	if l.Driver().Caps()&abi.CapDeviceAddr == 0 {
		t.Skipf("skipping: the vGPU has local memory but not CAPS bit 6 (CAPS %#x): ABI 1.3's device addresses have not landed in the device", l.Driver().Caps())
	}
	return l
}

func TestLocalAllocations(t *testing.T) {
	l := initLocalLib(t, localConfig(), Config{})
	d := l.Driver()
	base, err := d.Bus().ReadReg64(abi.RegDeviceAddrBase)
	if err != nil {
		t.Fatal(err)
	}
	apertureFree := d.FreeBytes()
	free0, total, r := l.MemGetInfo(thread)
	must(t, r)
	if total != localSize || free0 != localSize {
		t.Fatalf("cuMemGetInfo = %d free of %d, want all %d of local memory", free0, total, localSize)
	}
	if dt, _ := l.DeviceTotalMem(0); dt != localSize {
		t.Fatalf("cuDeviceTotalMem = %d, want %d", dt, localSize)
	}
	a, r := l.MemAlloc(thread, 10000)
	must(t, r)
	b, r := l.MemAlloc(thread, 1<<20)
	must(t, r)
	for _, p := range []uint64{a, b} {
		if p < base || p >= base+localSize {
			t.Fatalf("cuMemAlloc gave %#x, outside the device addresses [%#x, %#x)", p, base, base+localSize)
		}
	}
	if d.FreeBytes() != apertureFree {
		t.Fatalf("allocations took aperture memory: %d free, was %d", d.FreeBytes(), apertureFree)
	}
	if free, _, _ := l.MemGetInfo(thread); free != free0-3*abi.PageSize-1<<20 {
		t.Fatalf("cuMemGetInfo free %d after 3 + 256 pages, want %d", free, free0-3*abi.PageSize-1<<20)
	}
	if p, n, r := l.MemGetAddressRange(thread, a+9999); r != Success || p != a || n != 10000 {
		t.Fatalf("cuMemGetAddressRange(a+9999) = %#x %d %v", p, n, r)
	}
	_, _, r = l.MemGetAddressRange(thread, a+10000)
	want(t, "cuMemGetAddressRange of the page rounding after an allocation", r, ErrNotFound)
	if p, _, r := l.MemGetAddressRange(thread, b+4097); r != Success || p != b {
		t.Fatalf("cuMemGetAddressRange(b+4097) = %#x, %v; want %#x", p, r, b)
	}
	_, _, r = l.MemGetAddressRange(thread, base+localSize-1)
	want(t, "cuMemGetAddressRange of unallocated local memory", r, ErrNotFound)
	if _, err := d.ApertureOffset(a); err == nil {
		t.Fatalf("device pointer %#x is also a mapped graphics address", a)
	}
	want(t, "cuMemFree of an inner pointer", l.MemFree(thread, a+4), ErrInvalidValue)
	must(t, l.MemFree(thread, a))
	must(t, l.MemFree(thread, b))
	if free, _, _ := l.MemGetInfo(thread); free != free0 {
		t.Fatalf("cuMemGetInfo free %d after the frees, want %d", free, free0)
	}
	_, r = l.MemAlloc(thread, localSize+abi.PageSize)
	want(t, "cuMemAlloc beyond local memory", r, ErrOutOfMemory)
}

// TestLocalCopies moves bytes host→device→device→host through the
// staging slots, in pieces larger than a slot and at unaligned pointers
// inside allocations, staged by COPY through the aperture and by DMA.
func TestLocalCopies(t *testing.T) {
	for _, dma := range []bool{false, true} {
		name := map[bool]string{false: "aperture", true: "dma"}[dma]
		t.Run(name, func(t *testing.T) {
			l := initLocalLib(t, localConfig(), Config{DMACopies: dma})
			const n = 3<<20 + 12345 // several slots' worth
			a, r := l.MemAlloc(thread, n+16)
			must(t, r)
			b, r := l.MemAlloc(thread, n+16)
			must(t, r)
			src := pattern(n, 3)
			must(t, l.MemcpyHtoD(thread, a+5, src))
			must(t, l.MemcpyDtoD(thread, b+3, a+5, n, 0, true))
			got := make([]byte, n)
			must(t, l.MemcpyDtoH(thread, got, b+3))
			if i := firstDiff(got, src); i >= 0 {
				t.Fatalf("byte %d after HtoD, DtoD, DtoH is %#x, want %#x", i, got[i], src[i])
			}
			// A host copy right after async work sees it.
			must(t, l.Memset(thread, a, 0x77, 1, n+16, 0, true))
			must(t, l.MemcpyDtoH(thread, got[:64], a+100))
			if !bytes.Equal(got[:64], bytes.Repeat([]byte{0x77}, 64)) {
				t.Fatalf("cuMemsetD8Async then cuMemcpyDtoH reads %x", got[:64])
			}
			want(t, "cuMemcpyHtoD past the allocation", l.MemcpyHtoD(thread, a+17, src), ErrInvalidValue)
			want(t, "cuMemcpyDtoH between allocations", l.MemcpyDtoH(thread, got, a+n+16), ErrInvalidValue)
		})
	}
}

// TestLocalMemset is TestMemset on device-local memory: the unaligned ends
// of a memset are staged host copies, the middle one FILL.
func TestLocalMemset(t *testing.T) {
	l := initLocalLib(t, localConfig(), Config{})
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
	set(3, 0xab, 1, 1, false)
	set(5, 0xcd, 1, 2, true)
	set(1, 0x5a, 1, 1001, true)
	set(2002, 0xbeef, 2, 333, false)
	set(3000, 0x01020304, 4, 200, true)
	got := make([]byte, n)
	must(t, l.MemcpyDtoH(thread, got, a))
	if i := firstDiff(got, ref); i >= 0 {
		t.Fatalf("byte %d is %#x, want %#x", i, got[i], ref[i])
	}
}

// TestLocalContextDestroyFrees: destroying a context returns its local
// allocations.
func TestLocalContextDestroyFrees(t *testing.T) {
	l := initLocalLib(t, localConfig(), Config{})
	free0, _, _ := l.MemGetInfo(thread)
	c, r := l.CtxCreate(thread, 0, 0)
	must(t, r)
	_, r = l.MemAlloc(thread, 1<<20)
	must(t, r)
	must(t, l.CtxDestroy(c))
	if free, _, _ := l.MemGetInfo(thread); free != free0 {
		t.Fatalf("free %d after destroying the context, want %d", free, free0)
	}
}

// TestApertureWithoutDeviceAddresses: a vGPU without local memory (no
// CAPS bit 6) keeps today's allocations: device pointers are mapped
// graphics addresses.
func TestApertureWithoutDeviceAddresses(t *testing.T) {
	l := initLib(t)
	a, r := l.MemAlloc(thread, 4096)
	must(t, r)
	if _, err := l.Driver().ApertureOffset(a); err != nil {
		t.Fatalf("device pointer %#x is not a mapped graphics address: %v", a, err)
	}
}

// TestStreamErrorReportedOnce: on a device with streams a failed command
// leaves stream 0 in error, which skips its commands until cleared; the
// library reports the device's code once and clears it, so later calls
// run.
func TestStreamErrorReportedOnce(t *testing.T) {
	l := initLibConfig(t, localConfig(), Config{})
	if !l.Driver().Streams() {
		t.Fatalf("CAPS %#x: a vGPU with local memory has no streams", l.Driver().Caps())
	}
	a, r := l.MemAlloc(thread, 4096)
	must(t, r)
	l.mu.Lock()
	r = l.submitLocked(l.d.Copy(1<<40, 1<<40+4096, 8)) // graphics addresses no GTT entry maps
	l.mu.Unlock()
	must(t, r)
	if r := l.CtxSynchronize(thread); r == Success {
		t.Fatal("cuCtxSynchronize after a faulting COPY succeeded")
	}
	must(t, l.CtxSynchronize(thread))
	src := pattern(4096, 7)
	must(t, l.MemcpyHtoD(thread, a, src))
	must(t, l.MemcpyDtoD(thread, a, a+8, 8, 0, false)) // a command on stream 0 runs again
	got := make([]byte, 16)
	must(t, l.MemcpyDtoH(thread, got, a))
	if !bytes.Equal(got[:8], src[8:16]) {
		t.Fatalf("after the error was reported, a COPY did not run: %x", got)
	}
}

// TestLocalBeyondTheGTT: with device addresses allocations are bounded by
// LOCAL_MEM_SIZE, not by the GTT (at most 65536 entries, 256 MiB for the
// aperture and local memory together): 512 MiB of local memory is allocated whole, written and read
// back at sparse offsets (few bytes touched).
func TestLocalBeyondTheGTT(t *testing.T) {
	const big = 512 << 20
	l := initLocalLib(t, vgpu.Config{LocalMemSize: big}, Config{})
	d := l.Driver()
	if gtt := uint64(d.GTTEntries()) * abi.PageSize; gtt >= big {
		t.Fatalf("the GTT covers %d bytes: the test wants one smaller than local memory", gtt)
	}
	free, total, r := l.MemGetInfo(thread)
	must(t, r)
	if free != big || total != big {
		t.Fatalf("cuMemGetInfo = %d free of %d, want %d of %d", free, total, big, big)
	}
	// Three allocations, twice what the GTT could map, then
	// one of all local memory.
	sizes := []uint64{200 << 20, 200 << 20, big - 400<<20}
	ptrs := make([]uint64, len(sizes))
	for i, n := range sizes {
		ptrs[i], r = l.MemAlloc(thread, n)
		must(t, r)
	}
	if free, _, _ := l.MemGetInfo(thread); free != 0 {
		t.Fatalf("cuMemGetInfo free %d with all local memory allocated", free)
	}
	_, r = l.MemAlloc(thread, abi.PageSize)
	want(t, "cuMemAlloc with local memory full", r, ErrOutOfMemory)
	check := func(ptrs, sizes []uint64) {
		t.Helper()
		for i, p := range ptrs {
			n := sizes[i]
			for k, off := range []uint64{0, n/2 + 3, n - 4096} {
				src := pattern(4096, byte(i*3+k))
				must(t, l.MemcpyHtoD(thread, p+off, src))
			}
			// The last page again, by COPY from the first allocation, and
			// a FILL of 1 MiB in the middle.
			must(t, l.MemcpyDtoD(thread, p+n-4096, ptrs[0], 4096, 0, true))
			must(t, l.Memset(thread, p+n/4, 0x5a, 1, 1<<20, 0, true))
			got := make([]byte, 4096)
			for k, off := range []uint64{0, n/2 + 3} {
				must(t, l.MemcpyDtoH(thread, got, p+off))
				if j := firstDiff(got, pattern(4096, byte(i*3+k))); j >= 0 {
					t.Fatalf("allocation %d, offset %#x: byte %d is %#x", i, off, j, got[j])
				}
			}
			must(t, l.MemcpyDtoH(thread, got, p+n-4096))
			if j := firstDiff(got, pattern(4096, 0)); j >= 0 {
				t.Fatalf("allocation %d's last page: byte %d is %#x", i, j, got[j])
			}
			must(t, l.MemcpyDtoH(thread, got, p+n/4+1<<20-4096))
			if !bytes.Equal(got, bytes.Repeat([]byte{0x5a}, 4096)) {
				t.Fatalf("allocation %d: the memset's last page reads %x...", i, got[:16])
			}
		}
	}
	check(ptrs, sizes)
	for _, p := range ptrs {
		must(t, l.MemFree(thread, p))
	}
	all, r := l.MemAlloc(thread, big)
	must(t, r)
	check([]uint64{all}, []uint64{big})
	must(t, l.MemFree(thread, all))
}

// TestStreamIDs: on a device with streams each created stream gets the
// least used device stream id, never 0 (the default stream's), and gives
// it back when destroyed, by itself or with its context.
func TestStreamIDs(t *testing.T) {
	l := initLibConfig(t, localConfig(), Config{})
	ids := map[uint8]Handle{}
	for range 3 {
		s, r := l.StreamCreate(thread, 0)
		must(t, r)
		ids[l.streamIDLocked(s)] = s
	}
	if len(ids) != 3 || ids[0] != 0 {
		t.Fatalf("stream ids %v: want three distinct nonzero ids", ids)
	}
	must(t, l.StreamDestroy(ids[2]))
	s, r := l.StreamCreate(thread, 0)
	must(t, r)
	if id := l.streamIDLocked(s); id != 2 {
		t.Fatalf("a stream created after id 2's was destroyed got id %d, want 2", id)
	}
	c, r := l.CtxCreate(thread, 0, 0)
	must(t, r)
	s, r = l.StreamCreate(thread, 0)
	must(t, r)
	if id := l.streamIDLocked(s); id != 4 {
		t.Fatalf("the fourth live stream got id %d, want 4", id)
	}
	must(t, l.CtxDestroy(c))
	if l.streamUsers[4] != 0 {
		t.Fatalf("id 4 has %d users after its stream's context was destroyed", l.streamUsers[4])
	}
}
