package nvidia

// Checks of the GPU page hasher shared by the software model of a device
// (model_test.go, every build) and a real GPU (cuda_test.go, -tags cuda).
// The back end's own checks are the engine's, run over every back end
// (engine's nvidia_test.go and nvidia_cuda_test.go).

import (
	"testing"

	"github.com/gmig-dev/gmig/dirty"
)

// checkHasher compares a GPU hasher with the xxhash64 of each page (want),
// over every page and over a page list that repeats and jumps.
func checkHasher(t *testing.T, h *GPUHasher, want []uint64) {
	t.Helper()
	var ph dirty.PageHasher = h
	got := make([]uint64, len(want))
	if err := ph.HashPages(nil, got); err != nil {
		t.Fatal(err)
	}
	for p := range got {
		if got[p] != want[p] {
			t.Fatalf("%s page %d: GPU %#x, xxhash %#x", h.Name(), p, got[p], want[p])
		}
	}
	list := []int{len(want) - 1, 0, 7, len(want) / 2, 7, 1}
	got = make([]uint64, len(list))
	if err := ph.HashPages(list, got); err != nil {
		t.Fatal(err)
	}
	for i, p := range list {
		if got[i] != want[p] {
			t.Fatalf("%s list entry %d (page %d): GPU %#x, xxhash %#x", h.Name(), i, p, got[i], want[p])
		}
	}
	if err := ph.HashPages([]int{len(want)}, got); err == nil {
		t.Fatalf("%s: page out of range accepted", h.Name())
	}
}
