package vgpu

import (
	"errors"
	"fmt"

	"github.com/gmig-dev/gmig/internal/pool"
)

// ErrLocalInPool reports a discard of device-local memory that lives in
// the pool (the software back end's): its host pages are the memory
// itself.
var ErrLocalInPool = errors.New("vgpu: device-local memory lives in the pool: discarding it would erase it")

// DiscardLocal gives the host pages behind local pages [first, first+n)
// of LocalMemory back to the kernel (internal/pool's DiscardLocal): they
// read as zeros afterwards and hold no host memory until written again.
// Only a cuda vGPU's: its local memory lives on the GPU, and LocalMemory
// is a migration's receive buffer, whose pages a destination discards
// once they are on the GPU; any other vGPU fails with ErrLocalInPool. A
// closed vGPU fails with ErrClosed.
func (v *VGPU) DiscardLocal(first, n int) error {
	return v.adviseLocal(first, n, v.pool.DiscardLocal)
}

// FreeLocal is DiscardLocal that lets the kernel take the pages when it
// needs memory (internal/pool's FreeLocal, MADV_FREE) rather than at once:
// until then they keep their bytes, and a page written again (a page a
// destination's stop phase receives a second time) costs no page fault.
// Its errors are DiscardLocal's.
func (v *VGPU) FreeLocal(first, n int) error {
	return v.adviseLocal(first, n, v.pool.FreeLocal)
}

// adviseLocal checks DiscardLocal's and FreeLocal's arguments and applies
// advise (the pool's) to the local pages.
func (v *VGPU) adviseLocal(first, n int, advise func(pool.Partition, uint64, uint64) error) error {
	if v.cfg.Backend != BackendCUDA { // the config, not v.gpu, which Close clears
		return fmt.Errorf("vgpu %s: %w", v.cfg.Name, ErrLocalInPool)
	}
	if first < 0 || n < 0 {
		return fmt.Errorf("vgpu %s: local pages [%d, %d): %w", v.cfg.Name, first, first+n, pool.ErrRange)
	}
	v.memMu.RLock() // Close frees the partition: a later one may sit there
	defer v.memMu.RUnlock()
	if v.closed {
		return fmt.Errorf("vgpu %s: %w", v.cfg.Name, ErrClosed)
	}
	if err := advise(v.part, uint64(first)*pool.PageSize, uint64(n)*pool.PageSize); err != nil {
		return fmt.Errorf("vgpu %s: %w", v.cfg.Name, err)
	}
	return nil
}
