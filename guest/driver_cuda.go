package guest

import (
	"fmt"

	"github.com/gmig-dev/gmig/abi"
)

// Small additions for the guest CUDA library (guest/cudadrv).

// FenceDone reads FENCE_DONE (docs/device-abi.md §3): the value of the last
// fence that retired. Unlike Wait it never blocks, so a caller can ask
// whether a fence has retired (cuEventQuery, cuStreamQuery).
func (d *Driver) FenceDone() (uint64, error) {
	v, err := d.bus.ReadReg64(abi.RegFenceDone)
	if err != nil {
		return 0, fmt.Errorf("guest: reading FENCE_DONE: %w", err)
	}
	return v, nil
}
