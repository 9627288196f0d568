package nvidia

import (
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/gmig-dev/gmig/internal/cuda"
)

// Device-local memory (ABI 1.2, docs/device-abi.md §1.3) on the NVIDIA back
// end lives on the GPU alone: one virtual-memory-API mapping of its size
// (one cuMemAddressReserve, physical chunks of at most 1 GiB mapped into
// it, as the mirror is), with no host window and so nothing to keep
// coherent. Its address is the vGPU's device address base
// (RegDeviceAddrBase, ABI 1.3): local byte l is at DeviceAddrBase()+l.
// Extents the engine resolves into the partition's local range, window
// offsets [size, size+LocalSize) in spans' coordinates, name it: commands
// run on it in place, the engine's host-side reads and writes (ring fetch,
// DMA) go by cuMemcpy.

// ErrDeviceAddr reports that device-local memory could not be placed at
// the device address asked for (the driver gave another range: the
// address is taken in this process or on this GPU). A restore that needs
// the address fails with it, and a migration rolls back.
var ErrDeviceAddr = errors.New("nvidia: device-local memory cannot be placed at the address asked for")

// openLocal maps the back end's device-local memory, if it has any, and
// zeroes it: a fresh vGPU's local memory reads zero on every back end (the
// software back end's is fresh anonymous memory), and physical memory from
// cuMemCreate is not documented to be zeroed.
func (b *NVIDIA) openLocal() error {
	if b.cfg.LocalSize == 0 {
		return nil
	}
	var err error
	if b.local, err = b.dev.NewMapping(b.cfg.LocalSize, placeRegionAlign, 0); err != nil {
		return fmt.Errorf("nvidia: mapping %d bytes of device-local memory: %w", b.cfg.LocalSize, err)
	}
	b.placeAway()
	b.localBase.Store(uint64(b.local.Addr()))
	var ps []nvPiece
	base := uint64(b.local.Addr())
	for o := uint64(0); o < b.cfg.LocalSize; o += maxPiece {
		ps = append(ps, nvPiece{dst: base + o, len: min(maxPiece, b.cfg.LocalSize-o)})
	}
	if err := b.runPieces(b.g.fn.fillPieces, ps, false, 0); err != nil {
		return fmt.Errorf("nvidia: zeroing device-local memory: %w", err)
	}
	return nil
}

// isLocal reports whether window-relative offset off is device-local.
func (b *NVIDIA) isLocal(off uint64) bool { return off >= b.size }

// devAddr is the device address of window-relative offset off: the
// mirror's byte for the aperture, local memory's beyond it.
func (b *NVIDIA) devAddr(off uint64) uint64 {
	if b.isLocal(off) {
		return uint64(b.local.Addr()) + off - b.size
	}
	return uint64(b.mirror.Addr()) + off
}

// writeLocal copies src over local span s (the engine's DMA into local
// memory) and waits.
func (b *NVIDIA) writeLocal(s span, src []byte) error {
	if err := b.dev.CopyHtoD(cuda.DevPtr(b.devAddr(s.off)), src, b.stream); err != nil {
		return fmt.Errorf("nvidia: writing %d bytes of device-local memory: %w", len(src), err)
	}
	return b.dev.Sync(b.stream)
}

// readLocal copies local span s into dst (ring fetch, DMA out of local
// memory) and waits.
func (b *NVIDIA) readLocal(dst []byte, s span) error {
	if err := b.dev.CopyDtoH(dst, cuda.DevPtr(b.devAddr(s.off)), b.stream); err != nil {
		return fmt.Errorf("nvidia: reading %d bytes of device-local memory: %w", len(dst), err)
	}
	return b.dev.Sync(b.stream)
}

// LocalSize is the back end's device-local memory in bytes (0 for none).
func (b *NVIDIA) LocalSize() uint64 { return b.cfg.LocalSize }

// The device-address region fresh device-local memory is moved into: a
// random 1 GiB-aligned address in [32 TiB, 96 TiB) of the process's
// 128 TiB user address space. The driver's own choice lies among the
// process's mmap-ed libraries and heaps near the top (0x7f…), whose layout
// differs from process to process, so a destination gmigd usually had
// that range taken (measured on the H100: every restore in a second
// process refused); nothing maps in the region below unless asked (the
// driver grants such an address for a range of 1 GiB or more, not for a
// smaller one: cuda.Device.NewMappingIn), so the
// destination finds the source's address free unless one of its own vGPUs
// drew an overlapping one (odds about the share of the 64 TiB its vGPUs
// cover). Where every try is refused the driver's address is kept.
const (
	placeRegionLo    = 32 << 40
	placeRegionHi    = 96 << 40
	placeRegionAlign = 1 << 30
	placeTries       = 8
)

// placeAway moves freshly mapped local memory (not yet written) to a
// random address of the device-address region.
func (b *NVIDIA) placeAway() {
	size := (b.cfg.LocalSize + placeRegionAlign - 1) / placeRegionAlign * placeRegionAlign
	slots := (placeRegionHi - placeRegionLo - size) / placeRegionAlign
	for range placeTries {
		addr := placeRegionLo + rand.Uint64N(slots)*placeRegionAlign
		moved, err := b.local.Move(cuda.DevPtr(addr))
		if err == nil && moved {
			return
		}
		b.log.Debug().Err(err).Uint64("addr", addr).Msg("nvidia: device-address region: address refused")
	}
	b.log.Warn().Uint64("base", uint64(b.local.Addr())).Msg("nvidia: device-local memory left where the driver put it (the device-address region refused it): a migration to another process may not get this address")
}

// DeviceAddrBase implements engine.Backend: the device address of
// device-local byte 0 (2 MiB aligned: the reservation's alignment is the
// allocation granularity), 0 without local memory. Unlike the other
// methods it may be called from any goroutine (the register file's).
func (b *NVIDIA) DeviceAddrBase() uint64 { return b.localBase.Load() }

// PlaceLocal moves device-local memory to device address addr without
// copying (the same physical memory, mapped there), for a restore that
// must keep the source's RegDeviceAddrBase. When the driver does not grant
// addr, local memory stays where it is and the error wraps ErrDeviceAddr.
func (b *NVIDIA) PlaceLocal(addr uint64) error {
	if b.local == nil {
		if addr == 0 {
			return nil
		}
		return fmt.Errorf("%w: %#x asked of a back end without device-local memory", ErrDeviceAddr, addr)
	}
	if addr == uint64(b.local.Addr()) {
		return nil
	}
	from := uint64(b.local.Addr())
	moved, err := b.local.Move(cuda.DevPtr(addr))
	if err != nil {
		return fmt.Errorf("nvidia: moving device-local memory from %#x to %#x: %w", from, addr, err)
	}
	if !moved {
		return fmt.Errorf("%w: %#x (local memory stays at %#x)", ErrDeviceAddr, addr, from)
	}
	b.localBase.Store(addr)
	b.log.Info().Uint64("from", from).Uint64("base", addr).Msg("nvidia: device-local memory placed")
	return nil
}
