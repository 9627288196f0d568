package guest

import (
	"errors"
	"fmt"
	"strings"

	"github.com/gmig-dev/gmig/abi"
)

// ErrFenceLost is wrapped by Wait when the ring drained without reaching
// the fence (a framing error dropped the batch holding it).
var ErrFenceLost = errors.New("guest: fence dropped by the device")

// DeviceError is an error the device reported in ERR_STATUS
// (docs/device-abi.md §4), with the registers that locate it.
type DeviceError struct {
	Status     uint32 // abi.Err* bits
	RingOffset uint32 // ERR_RING_OFFSET: ring offset of the last failed command
	Opcode     uint32 // ERR_OPCODE: its opcode
	GTTIndex   uint32 // ERR_GTT_INDEX: last refused GTT index
}

// Has reports whether every bit of mask is set in Status.
func (e *DeviceError) Has(mask uint32) bool { return e.Status&mask == mask }

func (e *DeviceError) Error() string {
	return fmt.Sprintf("guest: device error %#x (%s), ring offset %#x, opcode %d, gtt index %d",
		e.Status, ErrBitNames(e.Status), e.RingOffset, e.Opcode, e.GTTIndex)
}

var errBitNames = []struct {
	bit  uint32
	name string
}{
	{abi.ErrGTTEntry, "gtt-entry"},
	{abi.ErrCommand, "command"},
	{abi.ErrPageFault, "page-fault"},
	{abi.ErrDMA, "dma"},
	{abi.ErrDoorbell, "doorbell"},
	{abi.ErrRing, "ring"},
	{abi.ErrKernel, "kernel"},
	{abi.ErrMMIO, "mmio"},
}

// ErrBitNames names the abi.Err* bits set in status, comma separated.
func ErrBitNames(status uint32) string {
	var names []string
	for _, b := range errBitNames {
		if status&b.bit != 0 {
			names = append(names, b.name)
			status &^= b.bit
		}
	}
	if status != 0 {
		names = append(names, fmt.Sprintf("%#x", status))
	}
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ",")
}
