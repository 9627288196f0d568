package nvidia

// Checks of device-local memory on the NVIDIA back end shared by the
// software model of a device (local_test.go, every build) and a real GPU
// (local_cuda_test.go, -tags cuda). newWin returns page-aligned host
// memory for a back end's window.

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
	"github.com/gmig-dev/gmig/gtt"
	"github.com/gmig-dev/gmig/internal/cuda"
)

const testWindow = 1 << 20

// newLocalBackend makes a back end on g with local bytes of device-local
// memory, closed with the test.
func newLocalBackend(t *testing.T, g *GPU, win []byte, local uint64) *NVIDIA {
	t.Helper()
	b, err := NewNVIDIA(NVIDIAConfig{GPU: g, Window: win, LocalSize: local})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// localExtent is bytes [off, off+n) of local memory of a back end over a
// testWindow-byte window at extent offset 0.
func localExtent(off, n uint64) []gtt.Extent { return []gtt.Extent{{Off: testWindow + off, Len: n}} }

func randBytes(seed uint64, n int) []byte {
	rng := rand.New(rand.NewPCG(seed, 1))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// checkLocalPlacement: local memory reads zero at first, sits at a 2 MiB
// aligned device address of its own, is reached by extents that cross
// from the aperture into it; asking for an address another back end holds
// is refused with ErrDeviceAddr and changes nothing, and once that one is
// closed the same request moves local memory there, bytes intact.
func checkLocalPlacement(t *testing.T, g *GPU, newWin func(int) []byte) {
	const local = 1 << 20
	b1 := newLocalBackend(t, g, newWin(testWindow), local)
	win2 := newWin(testWindow)
	b2 := newLocalBackend(t, g, win2, local)
	a1, a2 := b1.DeviceAddrBase(), b2.DeviceAddrBase()
	if a1 == 0 || a2 == 0 || a1%(2<<20) != 0 || a2%(2<<20) != 0 || a1 == a2 {
		t.Fatalf("device address bases %#x and %#x, want distinct nonzero 2 MiB multiples", a1, a2)
	}
	got := make([]byte, local)
	if err := b2.Read(got, localExtent(0, local)); err != nil || !bytes.Equal(got, make([]byte, local)) {
		t.Fatalf("fresh local memory: %v, or not all zero", err)
	}
	data := randBytes(3, local)
	if err := b2.Write(localExtent(0, local), data); err != nil {
		t.Fatal(err)
	}
	cross := randBytes(4, 200) // the window's last 100 bytes, local memory's first 100
	if err := b2.Write([]gtt.Extent{{Off: testWindow - 100, Len: 200}}, cross); err != nil {
		t.Fatal(err)
	}
	copy(data, cross[100:])
	if !bytes.Equal(win2[testWindow-100:], cross[:100]) {
		t.Error("a write across the aperture's end did not land in the window")
	}
	if err := b2.PlaceLocal(a1); !errors.Is(err, ErrDeviceAddr) {
		t.Fatalf("PlaceLocal at another back end's address: %v, want ErrDeviceAddr", err)
	}
	if b2.DeviceAddrBase() != a2 {
		t.Fatalf("a refused placement moved local memory to %#x", b2.DeviceAddrBase())
	}
	if err := b1.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b2.PlaceLocal(a1); err != nil {
		t.Fatalf("PlaceLocal at a freed address: %v", err)
	}
	if b2.DeviceAddrBase() != a1 {
		t.Fatalf("local memory at %#x after placement at %#x", b2.DeviceAddrBase(), a1)
	}
	if err := b2.Read(got, localExtent(0, local)); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("local memory after the move: %v, or bytes differ", err)
	}
}

// checkLocalTracker: a tracker's snapshot reads local memory in chunks
// larger than staging; after writes through commands and behind the
// engine's back (a copy straight to the device address, as a guest kernel
// writes) Changed lists exactly the pages whose bytes changed, Read
// returns them, and pages never snapshotted count as changed.
func checkLocalTracker(t *testing.T, g *GPU, newWin func(int) []byte) {
	pages := stagePages + 300
	local := uint64(pages) * pageBytes
	b := newLocalBackend(t, g, newWin(testWindow), local)
	want := randBytes(5, int(local))
	if err := b.Write(localExtent(0, local), want); err != nil {
		t.Fatal(err)
	}
	tr, err := b.NewLocalTracker()
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	buf := make([]byte, local)
	const batch = 1000 // pages per Snapshot, as a pre-copy's batches
	for lo := 0; lo < pages; lo += batch {
		n := min(batch, pages-lo)
		if err := tr.Snapshot(lo, n, buf[lo*pageBytes:]); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(buf, want) {
		t.Fatal("the snapshot differs from local memory")
	}
	if ch, err := tr.Changed(); err != nil || len(ch) != 0 {
		t.Fatalf("Changed with nothing written: %v, %v", ch, err)
	}
	behind := func(p int, off uint64, v []byte) {
		addr := b.DeviceAddrBase() + uint64(p)*pageBytes + off
		if err := g.ops.CopyHtoD(cuda.DevPtr(addr), v, 0); err != nil {
			t.Fatal(err)
		}
		if err := g.ops.Sync(0); err != nil {
			t.Fatal(err)
		}
		copy(want[uint64(p)*pageBytes+off:], v)
	}
	behind(0, 17, []byte{0xaa, 0xbb})
	behind(stagePages+5, 4000, []byte{1, 2, 3})
	behind(pages-1, 4095, []byte{0x42})
	behind(9, 0, want[9*pageBytes:9*pageBytes+64]) // same bytes: unchanged
	if err := b.Fill(localExtent(77*pageBytes, 64), 0x01020304); err != nil {
		t.Fatal(err)
	}
	for i := range 16 {
		copy(want[77*pageBytes+4*i:], []byte{4, 3, 2, 1})
	}
	ch, err := tr.Changed()
	if err != nil {
		t.Fatal(err)
	}
	if exp := []int{0, 77, stagePages + 5, pages - 1}; !slices.Equal(ch, exp) {
		t.Fatalf("Changed = %v, want %v", ch, exp)
	}
	// The same, range by range (ranges that cut nowhere near 64-page
	// words too): the union is Changed's answer, in order.
	var in []int
	for _, r := range [][2]int{{0, 1}, {1, 76}, {77, 1000}, {1077, pages - 1077}} {
		part, err := tr.ChangedIn(r[0], r[1])
		if err != nil {
			t.Fatal(err)
		}
		in = append(in, part...)
	}
	if !slices.Equal(in, ch) {
		t.Fatalf("ChangedIn over the ranges = %v, want %v", in, ch)
	}
	if _, err := tr.ChangedIn(pages-1, 2); err == nil {
		t.Error("ChangedIn past the last page succeeded")
	}
	got := make([]byte, len(ch)*pageBytes)
	if err := tr.Read(ch, got); err != nil {
		t.Fatal(err)
	}
	for i, p := range ch {
		if !bytes.Equal(got[i*pageBytes:(i+1)*pageBytes], want[p*pageBytes:(p+1)*pageBytes]) {
			t.Errorf("Read of changed page %d differs from what was written", p)
		}
	}
	// With their hashes (the ones ChangedIn took on the GPU): the same
	// bytes, and each hash the page's xxhash64.
	hr := tr.(HashedReader)
	hashed, sums := make([]byte, len(got)), make([]uint64, len(ch))
	if ok, err := hr.ReadHashed(ch, hashed, sums); err != nil || !ok {
		t.Fatalf("ReadHashed: %v, %v", ok, err)
	}
	if !bytes.Equal(hashed, got) {
		t.Error("ReadHashed's pages differ from Read's")
	}
	for i := range ch {
		if want := xxhash.Sum64(got[i*pageBytes : (i+1)*pageBytes]); sums[i] != want {
			t.Errorf("ReadHashed: page %d hash %#x, xxhash64 %#x", ch[i], sums[i], want)
		}
	}
	if err := tr.Snapshot(ch[0], 1, buf); err != nil {
		t.Fatal(err)
	}
	if _, err := hr.ReadHashed(ch[:1], hashed, sums); err == nil {
		t.Errorf("ReadHashed of page %d, snapshotted after its hash, succeeded", ch[0])
	}
	fresh, err := b.NewLocalTracker()
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.Close()
	if err := fresh.Snapshot(0, 10, buf); err != nil {
		t.Fatal(err)
	}
	if ch, err := fresh.Changed(); err != nil || len(ch) != pages-10 || ch[0] != 10 {
		t.Fatalf("Changed after a snapshot of 10 pages: %d pages from %v, %v; want the %d others", len(ch), ch[:min(1, len(ch))], err, pages-10)
	}
	if ch, err := fresh.ChangedIn(5, 10); err != nil || !slices.Equal(ch, []int{10, 11, 12, 13, 14}) {
		t.Fatalf("ChangedIn(5, 10) after a snapshot of 10 pages: %v, %v; want the 5 never snapshotted", ch, err)
	}
}

// checkLocalScattered: many scattered local pages (more than a staging
// chunk's worth, in runs of one page and longer) arrive exactly both ways:
// the tracker's Read gathers them in order, and LoadLocal on a fresh back
// end writes exactly them; bad input is refused and writes nothing.
func checkLocalScattered(t *testing.T, g *GPU, newWin func(int) []byte) {
	pages := stagePages + 4096
	local := uint64(pages) * pageBytes
	b := newLocalBackend(t, g, newWin(testWindow), local)
	want := randBytes(7, int(local))
	if err := b.Write(localExtent(0, local), want); err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 2))
	var list []int
	single, long, run := false, false, 0
	for p := range pages {
		if p == 0 || p == pages-1 || rng.IntN(100) < 85 {
			list = append(list, p)
			run++
			continue
		}
		single, long, run = single || run == 1, long || run > 1, 0
	}
	if len(list) <= stagePages || !single || !long {
		t.Fatalf("%d pages listed (want more than %d), runs of one %v, longer %v", len(list), stagePages, single, long)
	}
	tr, err := b.NewLocalTracker()
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	got := make([]byte, len(list)*pageBytes)
	if err := tr.Read(list, got); err != nil {
		t.Fatal(err)
	}
	for i, p := range list {
		if !bytes.Equal(got[i*pageBytes:(i+1)*pageBytes], want[p*pageBytes:(p+1)*pageBytes]) {
			t.Fatalf("Read: listed page %d (position %d) differs", p, i)
		}
	}

	b2 := newLocalBackend(t, g, newWin(testWindow), local)
	if err := b2.LoadLocal([]int{3, pages}, want); err == nil {
		t.Error("LoadLocal of a page past local memory succeeded")
	}
	if err := b2.LoadLocal(list[:1], want[:local-pageBytes]); err == nil {
		t.Error("LoadLocal from a host image shorter than local memory succeeded")
	}
	all := make([]byte, local)
	if err := b2.Read(all, localExtent(0, local)); err != nil || !bytes.Equal(all, make([]byte, local)) {
		t.Fatalf("refused LoadLocal calls wrote local memory (%v)", err)
	}
	if err := b2.LoadLocal(list, want); err != nil {
		t.Fatal(err)
	}
	exp := make([]byte, local)
	for _, p := range list {
		copy(exp[p*pageBytes:(p+1)*pageBytes], want[p*pageBytes:])
	}
	if err := b2.Read(all, localExtent(0, local)); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(all, exp) {
		for p := range pages {
			if !bytes.Equal(all[p*pageBytes:(p+1)*pageBytes], exp[p*pageBytes:(p+1)*pageBytes]) {
				t.Fatalf("LoadLocal: page %d differs (listed: %v)", p, slices.Contains(list, p))
			}
		}
	}
}

// checkLocalBulk: with a bulk buffer registered (NVIDIAConfig.Bulk, a GPU
// worker's), the tracker's Snapshot and Read into it and LoadLocalPacked
// from it move the same bytes as through ordinary memory, and the
// tracker's own pinned staging is not used for them (its bytes stay as
// they were), while a Snapshot into ordinary memory goes through it.
func checkLocalBulk(t *testing.T, g *GPU, newWin func(int) []byte) {
	const pages = 64
	local := uint64(pages) * pageBytes
	bulk := newWin(2 * pages * pageBytes)
	b, err := NewNVIDIA(NVIDIAConfig{GPU: g, Window: newWin(testWindow), LocalSize: local, Bulk: bulk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	want := randBytes(9, int(local))
	if err := b.Write(localExtent(0, local), want); err != nil {
		t.Fatal(err)
	}
	r, err := b.NewLocalTracker()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	tr := r.(*LocalTracker)
	staging := func(v byte) bool { return bytes.Count(tr.host[:local], []byte{v}) == int(local) }
	for i := range tr.host {
		tr.host[i] = 0x5a
	}
	snap := bulk[pages*pageBytes:]
	if err := tr.Snapshot(0, pages, snap); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(snap, want) || !staging(0x5a) {
		t.Fatalf("snapshot into the bulk buffer: equal %v, staging untouched %v", bytes.Equal(snap, want), staging(0x5a))
	}
	list := []int{63, 0, 7, 8, 9, 30}
	if err := tr.Read(list, bulk); err != nil {
		t.Fatal(err)
	}
	for i, p := range list {
		if !bytes.Equal(bulk[i*pageBytes:(i+1)*pageBytes], want[p*pageBytes:(p+1)*pageBytes]) {
			t.Fatalf("read of page %d into the bulk buffer differs", p)
		}
	}
	if !staging(0x5a) {
		t.Fatal("a read into the bulk buffer went through the tracker's staging")
	}
	plain := make([]byte, local)
	if err := tr.Snapshot(0, pages, plain); err != nil || !bytes.Equal(plain, want) || staging(0x5a) {
		t.Fatalf("snapshot into ordinary memory: %v, equal %v, through staging %v", err, bytes.Equal(plain, want), !staging(0x5a))
	}
	// LoadLocalPacked from the bulk buffer: the listed pages (packed at
	// bulk's start by the Read above) onto a zeroed local memory.
	if err := b.Fill(localExtent(0, local), 0); err != nil {
		t.Fatal(err)
	}
	if err := b.LoadLocalPacked(list, bulk[:len(list)*pageBytes]); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, local)
	if err := b.Read(got, localExtent(0, local)); err != nil {
		t.Fatal(err)
	}
	for p := range pages {
		exp := make([]byte, pageBytes)
		if slices.Contains(list, p) {
			exp = want[p*pageBytes : (p+1)*pageBytes]
		}
		if !bytes.Equal(got[p*pageBytes:(p+1)*pageBytes], exp) {
			t.Fatalf("page %d after LoadLocalPacked from the bulk buffer", p)
		}
	}
}
