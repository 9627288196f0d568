package cudadrv

import (
	"fmt"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/bytesize"
)

// Host copies to and from device-local memory, which only commands reach.
// The bytes pass through staging slots the CPU can write: pieces of the
// aperture moved by COPY (the default), or of the library's DMA memory
// moved by DMA_TO_GFX / DMA_FROM_GFX (Config.DMACopies). A copy goes chunk
// by chunk over stagingSlots slots, so the CPU's copy of chunk i+1 overlaps
// the device's move of chunk i; each slot remembers the fence after the
// last command that used it and is reused once that fence retired.
//
// A host-to-device copy returns once the last chunk is staged and its
// command queued (the source may then change; later commands are ordered
// after it on the ring), as cuMemcpyHtoD does for pageable memory; a
// device-to-host copy returns with the bytes.

// Staging geometry: stagingSlots slots of at most Config.StagingChunk
// bytes (DefaultStagingChunk), at most 1/stagingApertureShare of the mapped
// aperture in all (the ring, module images and launch parameters live
// there too). Four slots keep two chunks in flight while the CPU fills a
// third (a choice; BenchmarkCopyHtoD measures it).
const (
	stagingSlots         = 4
	stagingApertureShare = 4
)

// DefaultStagingChunk is Config.StagingChunk's default. Every chunk pays a
// doorbell, a COPY, a FENCE and a wait, so bigger chunks pay them fewer
// times per byte, while the first chunk's CPU copy is not overlapped with
// any move; docs/cuda.md gives the measurement that picked it.
const DefaultStagingChunk = 4 << 20

// ParseStagingChunk reads a staging chunk size as GMIG_CUDA_STAGING_CHUNK
// gives it: bytes, with an optional binary suffix (K, M, G), a positive
// multiple of 4096.
func ParseStagingChunk(s string) (uint64, error) {
	n, err := bytesize.Parse(s)
	if err != nil {
		return 0, fmt.Errorf("cudadrv: staging chunk: %w", err)
	}
	if n == 0 || n%abi.PageSize != 0 {
		return 0, fmt.Errorf("cudadrv: staging chunk %q: want a positive multiple of %d bytes", s, abi.PageSize)
	}
	return n, nil
}

// stagingChunk is the chunk Config asks for, or the default: for DMA
// slots the guest driver's own DMA chunk (guest.DefaultStagingSize), since
// a guest's DMA memory is small (8 MiB of huge pages, docs/cuda.md).
func (l *Lib) stagingChunk() uint64 {
	switch {
	case l.cfg.StagingChunk != 0:
		return l.cfg.StagingChunk &^ (abi.PageSize - 1)
	case l.cfg.DMACopies:
		return guest.DefaultStagingSize
	}
	return DefaultStagingChunk
}

type stagingSlot struct {
	fence uint64 // fence after the last command that used the slot; 0 none
	ga    uint64 // aperture slot: its graphics address
	gpa   uint64 // DMA slot: its guest-physical address
	buf   []byte // DMA slot: its bytes
}

type staging struct {
	dma   bool
	chunk uint64
	slots [stagingSlots]stagingSlot
	next  int
}

// setupStagingLocked places the staging slots (once, at the first host
// copy to local memory).
func (l *Lib) setupStagingLocked() error {
	if l.stage != nil {
		return nil
	}
	s := &staging{dma: l.cfg.DMACopies}
	s.chunk = min(l.stagingChunk(), l.d.MappedSize()/stagingApertureShare/stagingSlots) &^ (abi.PageSize - 1)
	if s.chunk == 0 {
		return fmt.Errorf("cudadrv: a %#x-byte aperture has no room for staging", l.d.MappedSize())
	}
	for i := range s.slots {
		var err error
		if s.dma {
			dma := l.d.Bus().DMA()
			if dma == nil {
				return fmt.Errorf("cudadrv: staging by DMA: the bus has no DMA memory")
			}
			s.slots[i].gpa, s.slots[i].buf, err = dma.Alloc(s.chunk)
		} else {
			s.slots[i].ga, err = l.d.Alloc(s.chunk)
		}
		if err != nil {
			return fmt.Errorf("cudadrv: placing staging slot %d: %w", i, err)
		}
	}
	l.stage = s
	return nil
}

// slotLocked is the next slot, once the commands that used it retired.
func (l *Lib) slotLocked() (*stagingSlot, Result) {
	s := &l.stage.slots[l.stage.next]
	l.stage.next = (l.stage.next + 1) % stagingSlots
	if s.fence != 0 {
		if r := l.waitFenceLocked(s.fence); r != Success {
			return nil, r
		}
		s.fence = 0
	}
	return s, Success
}

// stageWriteLocked copies p to graphics address ga (device-local) through
// the staging slots, without waiting for the last chunk to land.
func (l *Lib) stageWriteLocked(ga uint64, p []byte) Result {
	if err := l.setupStagingLocked(); err != nil {
		return l.fail(ErrOutOfMemory, err)
	}
	for len(p) > 0 {
		s, r := l.slotLocked()
		if r != Success {
			return r
		}
		n := min(uint64(len(p)), l.stage.chunk)
		var err error
		if l.stage.dma {
			copy(s.buf, p[:n])
			err = l.d.DMAToGfx(ga, s.gpa, n)
		} else if err = l.d.WriteGA(s.ga, p[:n]); err == nil {
			err = l.d.Copy(ga, s.ga, n)
		}
		if err != nil {
			return l.fail(ErrUnknown, fmt.Errorf("cudadrv: staging %d bytes to %#x: %w", n, ga, err))
		}
		if s.fence, r = l.fenceLocked(); r != Success {
			return r
		}
		ga, p = ga+n, p[n:]
	}
	return Success
}

// stageReadLocked copies len(p) bytes at graphics address ga
// (device-local) into p through the staging slots: every slot's move is
// queued ahead of the CPU copy that empties the oldest.
func (l *Lib) stageReadLocked(ga uint64, p []byte) Result {
	if err := l.setupStagingLocked(); err != nil {
		return l.fail(ErrOutOfMemory, err)
	}
	type inflight struct {
		s   *stagingSlot
		dst []byte
	}
	var queue []inflight
	drain := func() Result {
		f := queue[0]
		queue = queue[1:]
		if r := l.waitFenceLocked(f.s.fence); r != Success {
			return r
		}
		f.s.fence = 0
		if l.stage.dma {
			copy(f.dst, f.s.buf)
		} else if err := l.d.ReadGA(f.s.ga, f.dst); err != nil {
			return l.fail(ErrUnknown, fmt.Errorf("cudadrv: reading staged bytes: %w", err))
		}
		return Success
	}
	for len(p) > 0 {
		if len(queue) == stagingSlots {
			if r := drain(); r != Success {
				return r
			}
		}
		s, r := l.slotLocked()
		if r != Success {
			return r
		}
		n := min(uint64(len(p)), l.stage.chunk)
		var err error
		if l.stage.dma {
			err = l.d.DMAFromGfx(ga, s.gpa, n)
		} else {
			err = l.d.Copy(s.ga, ga, n)
		}
		if err != nil {
			return l.fail(ErrUnknown, fmt.Errorf("cudadrv: staging %d bytes from %#x: %w", n, ga, err))
		}
		if s.fence, r = l.fenceLocked(); r != Success {
			return r
		}
		queue = append(queue, inflight{s, p[:n]})
		ga, p = ga+n, p[n:]
	}
	for len(queue) > 0 {
		if r := drain(); r != Success {
			return r
		}
	}
	return Success
}
