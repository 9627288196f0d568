package nvidia

import "testing"

// Device-local memory on the model of a device (local_shared_test.go).

func TestLocalPlacementModel(t *testing.T) {
	checkLocalPlacement(t, NewModelGPU(), func(n int) []byte { return make([]byte, n) })
}

func TestLocalTrackerModel(t *testing.T) {
	checkLocalTracker(t, NewModelGPU(), func(n int) []byte { return make([]byte, n) })
}

func TestLocalScatteredModel(t *testing.T) {
	checkLocalScattered(t, NewModelGPU(), func(n int) []byte { return make([]byte, n) })
}

func TestLocalBulkModel(t *testing.T) {
	checkLocalBulk(t, NewModelGPU(), func(n int) []byte { return make([]byte, n) })
}
