package nvidia

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/gmig-dev/gmig/internal/cuda"
)

// ModelEnv names the environment variable that replaces libcuda with the
// software model of a GPU (model.go): GMIG_CUDA_MODEL=N presents N model
// GPUs, ordinals 0 to N-1, each with a UUID of its own (ModelUUID), so
// that choosing among GPUs runs everywhere, CI included. Unset or empty:
// the real driver.
const ModelEnv = "GMIG_CUDA_MODEL"

// maxModelGPUs bounds ModelEnv: the most GPUs one host of gmig's device
// machines has is 8 (docs/nvidia.md); a few more cover tests of more.
const maxModelGPUs = 16

// modelCount is the number of model GPUs ModelEnv asks for (0: none).
func modelCount() (int, error) {
	v := os.Getenv(ModelEnv)
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxModelGPUs {
		return 0, fmt.Errorf("nvidia: %s=%q: want a number of model GPUs, 1 to %d", ModelEnv, v, maxModelGPUs)
	}
	return n, nil
}

// Modelled reports whether ModelEnv replaces the driver with the model.
func Modelled() bool {
	n, _ := modelCount()
	return n > 0
}

// ModelUUID is model GPU ordinal's UUID, in NVML's format; "6d6f64656c"
// spells "model".
func ModelUUID(ordinal int) string {
	return fmt.Sprintf("GPU-6d6f6465-6c00-4000-8000-%012x", ordinal)
}

// modelInfo describes model GPU ordinal. Its memory is nominal (the model
// allocates in host memory, as much as is asked).
func modelInfo(ordinal int) cuda.DeviceInfo {
	return cuda.DeviceInfo{Ordinal: ordinal, Name: "gmig model GPU", UUID: ModelUUID(ordinal),
		TotalMem: 80 << 30, PCIBusID: fmt.Sprintf("model:%02x", ordinal), VMM: true, MapHost: true}
}

// Devices lists the GPUs CUDA sees, by ordinal, without taking a context
// (or any device memory) on them: the model's with ModelEnv. Without a
// driver or a device the error wraps cuda.ErrNoDriver or cuda.ErrNoDevice.
// CUDA's ordinals need not follow NVML's indices (CUDA puts the fastest
// GPU first unless CUDA_DEVICE_ORDER=PCI_BUS_ID, and CUDA_VISIBLE_DEVICES
// hides and renumbers): match GPUs by UUID.
func Devices() ([]cuda.DeviceInfo, error) {
	n, err := modelCount()
	if err != nil {
		return nil, err
	}
	if n > 0 {
		out := make([]cuda.DeviceInfo, n)
		for i := range out {
			out[i] = modelInfo(i)
		}
		return out, nil
	}
	drv, err := cuda.Open()
	if err != nil {
		return nil, err
	}
	if n, err = drv.DeviceCount(); err != nil {
		return nil, fmt.Errorf("nvidia: %w", err)
	}
	out := make([]cuda.DeviceInfo, n)
	for i := range out {
		if out[i], err = drv.Describe(i); err != nil {
			return nil, fmt.Errorf("nvidia: GPU %d: %w", i, err)
		}
	}
	return out, nil
}

// FindUUID returns the CUDA ordinal of the GPU whose UUID is uuid (case
// does not matter) among devs (Devices), or false.
func FindUUID(devs []cuda.DeviceInfo, uuid string) (int, bool) {
	for _, d := range devs {
		if strings.EqualFold(d.UUID, uuid) {
			return d.Ordinal, true
		}
	}
	return 0, false
}
