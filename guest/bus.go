package guest

import (
	"context"
	"errors"
)

// ErrNoIRQ is returned by Bus.WaitIRQ when the transport cannot deliver
// interrupts; the driver then polls.
var ErrNoIRQ = errors.New("guest: bus cannot deliver interrupts")

// Bus is how the driver reaches one vGPU: trapped BAR0 registers and GTT
// window, the mapped aperture (BAR2), guest RAM for DMA and the interrupt
// line. Offsets are BAR0 byte offsets.
type Bus interface {
	ReadReg32(off uint32) (uint32, error)
	WriteReg32(off uint32, v uint32) error
	ReadReg64(off uint32) (uint64, error)
	WriteReg64(off uint32, v uint64) error
	// WriteGTT writes entries to GTT indices first, first+1, ... A real
	// guest issues one 8-byte store per entry; a simulator may batch.
	WriteGTT(first uint32, entries []uint64) error
	// Aperture is BAR2, mapped: aperture byte i is graphics-memory byte i.
	Aperture() []byte
	// DMA is guest RAM the device can reach by guest-physical address; nil
	// when the transport has none.
	DMA() DMAMemory
	// WaitIRQ blocks until the device signals an interrupt (or ctx ends).
	// It returns ErrNoIRQ when the bus can only poll.
	WaitIRQ(ctx context.Context) error
}

// DMAMemory hands out guest RAM the device can DMA: page-aligned buffers
// with their guest-physical address. Buffers live as long as the memory.
type DMAMemory interface {
	Alloc(n uint64) (gpa uint64, buf []byte, err error)
}
