package vgpu

import (
	"sync/atomic"

	"github.com/gmig-dev/gmig/vfio"
)

// guestRAM is the engine's way to guest RAM (DMA_TO_GFX reads it,
// DMA_FROM_GFX writes it), through the client's DMA table. Its writes can
// be observed: the VMM's own live migration tracks the guest CPU's writes
// to RAM, not the device's, so a migration must carry the pages the
// engine wrote (precopy, "guest RAM the device wrote"), or the VMM asks
// for them through the vfio-user DMA logging features (log).
type guestRAM struct {
	dma  *vfio.DMATable
	hook atomic.Pointer[func(gpa, n uint64)]
	log  vfio.DMALog // marked with every write, while the client logs
}

func (r *guestRAM) ReadAt(p []byte, gpa uint64) error { return r.dma.ReadAt(p, gpa) }

func (r *guestRAM) WriteAt(p []byte, gpa uint64) error {
	err := r.dma.WriteAt(p, gpa)
	// Marked even when the write failed part-way: a page reported that
	// was not written costs a page resent; one written and not reported
	// would arrive stale.
	r.log.Mark(gpa, uint64(len(p)))
	if f := r.hook.Load(); f != nil && err == nil {
		(*f)(gpa, uint64(len(p)))
	}
	return err
}

// DMALog implements vfio.DMALogger: the engine's writes into guest RAM
// (the exact ranges of its DMA_FROM_GFX commands) answer a VMM that logs
// the device's DMA for its own live migration (docs/migration-protocol.md,
// §8).
func (v *VGPU) DMALog() *vfio.DMALog { return &v.ram.log }

// ObserveGuestWrites makes the engine report every guest-RAM range it
// writes (DMA addresses, as the guest gave them) to f, until
// ObserveGuestWrites(nil). f is called from the engine goroutine and must
// be quick. There is one observer at a time: a second fails with
// ErrObserved.
func (v *VGPU) ObserveGuestWrites(f func(gpa, n uint64)) error {
	if f == nil {
		v.ram.hook.Store(nil)
		return nil
	}
	if !v.ram.hook.CompareAndSwap(nil, &f) {
		return ErrObserved
	}
	return nil
}

// ReadGuest reads guest RAM at DMA address gpa, through the current
// client's mappings.
func (v *VGPU) ReadGuest(p []byte, gpa uint64) error { return v.dma.ReadAt(p, gpa) }

// WriteGuest writes guest RAM at DMA address gpa, through the current
// client's mappings.
func (v *VGPU) WriteGuest(p []byte, gpa uint64) error { return v.dma.WriteAt(p, gpa) }
