//go:build cuda

package nvidia

import (
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/internal/cuda"
)

// Device-local memory on a real GPU (local_shared_test.go): placement at
// a device address another allocation of this process holds is refused,
// and the tracker's GPU hashes find writes made behind the engine's back.

// mmapWin returns n bytes of shared anonymous memory (page aligned, as a
// pool memfd's), unmapped with the test.
func mmapWin(t *testing.T) func(int) []byte {
	return func(n int) []byte {
		b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Munmap(b) })
		return b
	}
}

func TestLocalPlacementGPU(t *testing.T) { checkLocalPlacement(t, testGPU(t), mmapWin(t)) }

func TestLocalTrackerGPU(t *testing.T) { checkLocalTracker(t, testGPU(t), mmapWin(t)) }

func TestLocalScatteredGPU(t *testing.T) { checkLocalScattered(t, testGPU(t), mmapWin(t)) }

func TestLocalBulkGPU(t *testing.T) { checkLocalBulk(t, testGPU(t), mmapWin(t)) }

// TestLocalTrackerTimes measures a migration's work on local memory of the
// sizes GMIG_LOCAL_TIMES lists in GiB (GMIG_LOCAL_TIMES=1,4,16 on the
// H100; unset, the test skips): the pre-copy's snapshot of every page (device copy, hash,
// PCIe copy), then, with 1 % of the pages written behind the engine's
// back, the stop's Changed (hash in place, compare on the GPU) and Read of
// the changed pages, and a destination's LoadLocal of them. It checks that
// Changed finds exactly those pages.
func TestLocalTrackerTimes(t *testing.T) {
	var sizes []uint64
	for _, f := range strings.Split(os.Getenv("GMIG_LOCAL_TIMES"), ",") {
		if n, err := strconv.ParseUint(f, 10, 64); err == nil && n > 0 {
			sizes = append(sizes, n)
		}
	}
	if len(sizes) == 0 {
		t.Skip("set GMIG_LOCAL_TIMES to sizes in GiB (1,4,16) to measure")
	}
	g := testGPU(t)
	for _, gib := range sizes {
		local := gib << 30
		pages := int(local / pageBytes)
		b := newLocalBackend(t, g, mmapWin(t)(testWindow), local)
		tr, err := b.NewLocalTracker()
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, stageBytes)
		start := time.Now()
		for lo := 0; lo < pages; lo += stagePages {
			if err := tr.Snapshot(lo, min(stagePages, pages-lo), buf); err != nil {
				t.Fatal(err)
			}
		}
		snap := time.Since(start)
		rng := rand.New(rand.NewPCG(gib, 2))
		dirty := map[int]bool{}
		for len(dirty) < pages/100 {
			dirty[rng.IntN(pages)] = true
		}
		word := []byte{1, 2, 3, 4, 5, 6, 7, 8}
		for p := range dirty {
			if err := g.ops.CopyHtoD(cuda.DevPtr(b.DeviceAddrBase()+uint64(p)*pageBytes+uint64(8*rng.IntN(512))), word, 0); err != nil {
				t.Fatal(err)
			}
		}
		if err := g.ops.Sync(0); err != nil {
			t.Fatal(err)
		}
		start = time.Now()
		ch, err := tr.Changed()
		if err != nil {
			t.Fatal(err)
		}
		changed := time.Since(start)
		// A migration reads into buffers it reuses: touch this one first
		// so that the kernel's page faults on fresh memory stay out of
		// the read's time.
		out := make([]byte, len(ch)*pageBytes)
		for i := 0; i < len(out); i += pageBytes {
			out[i] = 1
		}
		start = time.Now()
		if err := tr.Read(ch, out); err != nil {
			t.Fatal(err)
		}
		read := time.Since(start)
		if len(ch) != len(dirty) {
			t.Errorf("%d GiB: Changed found %d pages, %d were written", gib, len(ch), len(dirty))
		}
		t.Logf("local: gpu-hash %d GiB, %d pages dirty: snapshot %v (%.1f GB/s), stop hash+compare %v (%.0f GB/s), read %v (%.1f GB/s)",
			gib, len(ch), snap.Round(time.Millisecond), float64(local)/snap.Seconds()/1e9,
			changed.Round(10*time.Microsecond), float64(local)/changed.Seconds()/1e9,
			read.Round(10*time.Microsecond), float64(len(out))/read.Seconds()/1e9)
		img := mmapWin(t)(int(local)) // a destination's receive buffer: the changed pages arrived
		for i, p := range ch {
			copy(img[p*pageBytes:(p+1)*pageBytes], out[i*pageBytes:])
		}
		// A destination's first load (a pre-copy flush) allocates the
		// pinned staging; the stop phase's load finds it there.
		if err := b.LoadLocal(ch[:1], img); err != nil {
			t.Fatal(err)
		}
		start = time.Now()
		if err := b.LoadLocal(ch, img); err != nil {
			t.Fatal(err)
		}
		load := time.Since(start)
		t.Logf("local: %d GiB, destination load of the %d changed pages %v (%.1f GB/s)",
			gib, len(ch), load.Round(10*time.Microsecond), float64(len(out))/load.Seconds()/1e9)
		if err := tr.Close(); err != nil {
			t.Fatal(err)
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLocalPlacedAway: fresh device-local memory lies in the
// device-address region (placeAway), where another process finds it free.
// On the H100: 0x32a140000000, 0x36f4c0000000, 0x4b4a00000000 (before
// NewMappingIn's 1 GiB reservations, every move there was refused).
func TestLocalPlacedAway(t *testing.T) {
	g := testGPU(t)
	log := zerolog.New(zerolog.NewTestWriter(t)).Level(zerolog.DebugLevel)
	for i := range 3 {
		b, err := NewNVIDIA(NVIDIAConfig{GPU: g, Window: mmapWin(t)(testWindow), LocalSize: 256 << 10, Log: log})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.Close() })
		base := b.DeviceAddrBase()
		t.Logf("vGPU %d: device-local memory at %#x", i, base)
		if base < placeRegionLo || base >= placeRegionHi {
			t.Errorf("vGPU %d: device-local memory at %#x, outside [%#x, %#x)", i, base, uint64(placeRegionLo), uint64(placeRegionHi))
		}
	}
}
