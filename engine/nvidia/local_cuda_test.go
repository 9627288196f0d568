//go:build cuda

package nvidia

import (
	"testing"

	"golang.org/x/sys/unix"
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
