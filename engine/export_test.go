package engine

import "testing"

// The checks of backends_test.go for back ends of other packages, which
// this package's tests cannot import (they import engine): the external
// tests (package engine_test) run them on those back ends.

// NewBackend makes a back end over window (the harness's host pool) for t.
type NewBackend func(t testing.TB, window []byte) Backend

// RunDifferential is runDifferential: newB's back end against the software
// one over identical copies of win, seed varying the operations.
func RunDifferential(t *testing.T, newB NewBackend, win []byte, seed uint64) {
	runDifferential(t, newB, win, seed)
}

// NewLocalBackend makes a back end over window followed by local bytes of
// device-local memory (extents from len(window) on), for t.
type NewLocalBackend func(t testing.TB, window []byte, local uint64) Backend

// RunLocalDifferential is RunDifferential with local bytes of device-local
// memory after win, which operations reach too.
func RunLocalDifferential(t *testing.T, newB NewLocalBackend, win []byte, local, seed uint64) {
	runDifferentialLocal(t, newB, win, local, seed)
}

// RunEngineModel is runEngineModel on newB's back end.
func RunEngineModel(t *testing.T, newB NewBackend) { runEngineModel(t, withBackend(newB)) }

// RunGuestModule is runGuestModule on newB's back end, which must run guest
// modules and have a device address space (MirrorBase, Close).
func RunGuestModule(t *testing.T, newB NewBackend) { runGuestModule(t, withBackend(newB)) }

// RunLaunchGrid is runLaunchGrid on newB's back end, which must run guest
// modules and give device buffers (DeviceAlloc...): the kernels' outputs
// by name.
func RunLaunchGrid(t *testing.T, newB NewBackend, seed uint64) map[string][]byte {
	return runLaunchGrid(t, withBackend(newB), seed)
}

// RunLaunchGridFault is runLaunchGridFault on newB's back end.
func RunLaunchGridFault(t *testing.T, newB NewBackend) { runLaunchGridFault(t, withBackend(newB)) }

// BenchLaunchGrid is benchLaunchGrid on newB's back end.
func BenchLaunchGrid(b *testing.B, newB NewBackend) { benchLaunchGrid(b, withBackend(newB)) }

// withBackend runs a harness on newB's back end over its pool.
func withBackend(newB NewBackend) harnessOpt {
	return func(h *harness, c *Config) { c.Backend = newB(h.t, h.pool) }
}

// RunDeviceAddr is runDeviceAddr on newB's back end with device-local
// memory (nil: the software back end): what the program left in graphics
// memory and guest RAM.
func RunDeviceAddr(t *testing.T, newB NewLocalBackend) []byte { return runDeviceAddr(t, newB) }

// RunDeviceAddrGrid is runDeviceAddrGrid on newB's back end, which must
// run guest modules.
func RunDeviceAddrGrid(t *testing.T, newB NewLocalBackend) { runDeviceAddrGrid(t, newB) }
