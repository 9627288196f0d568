package engine

import "testing"

func TestNVIDIAModelMatchesSoftware(t *testing.T) {
	g := newModelGPU()
	runDifferential(t, func(t testing.TB, window []byte, wb WriteBack) *NVIDIA {
		return newNVIDIAOn(t, g, window, wb, false)
	}, make([]byte, 8<<20))
}

func TestNVIDIAModelEngine(t *testing.T) {
	runEngineModel(t, withNVIDIAOn(newModelGPU(), false))
}

func TestNVIDIAModelGuestModule(t *testing.T) {
	runGuestModule(t, withNVIDIAOn(newModelGPU(), true))
}
