package cudadrv

import (
	"encoding/binary"
	"fmt"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/guest"
)

// Launch parameter buffers (LAUNCH_GRID, docs/device-abi.md §6.10, ABI
// 1.3). The device reads a launch's buffer when it runs the launch, so the
// buffer must stay until then. Buffers go one after another into segments
// of an aperture arena; a segment is closed by a fence when the next
// buffer does not fit, and written again only once that fence retired —
// one fence (and doorbell) per segment of launches, not one per launch.

// Arena geometry: paramSegments segments of paramSegmentSize bytes, one
// segment holding the largest buffer the device takes (4096 bytes, §6.9)
// or 128 of vecAdd's 28-byte one; paramAlign aligns each buffer (PTX's
// widest parameter alignment that cuFuncGetParamInfo layouts use is a
// .align 16 vector). Sixteen segments make a wait for a segment rare (a
// choice).
const (
	paramSegments    = 16
	paramSegmentSize = maxParamBytes
	paramAlign       = 16
	maxParamBytes    = 4096 // LAUNCH_GRID's params_len bound (abi13 contract, as LAUNCH_PARAMS §6.9)
)

type paramArena struct {
	ga    uint64                // graphics address of segment 0
	fence [paramSegments]uint64 // fence closing each segment; 0 free
	cur   int                   // segment being filled
	off   uint64                // next free byte in it
}

// placeParamsLocked stores a launch's parameter buffer where it lives
// until the launch retired and returns its graphics address (0 for an
// empty buffer, which the device does not read).
func (l *Lib) placeParamsLocked(p []byte) (uint64, Result) {
	if len(p) == 0 {
		return 0, Success
	}
	if l.params == nil {
		ga, err := l.d.Alloc(paramSegments * paramSegmentSize)
		if err != nil {
			return 0, l.fail(ErrOutOfMemory, fmt.Errorf("cudadrv: placing the launch parameter arena: %w", err))
		}
		l.params = &paramArena{ga: ga}
	}
	a := l.params
	n := (uint64(len(p)) + paramAlign - 1) &^ (paramAlign - 1)
	if a.off+n > paramSegmentSize {
		v, r := l.fenceLocked()
		if r != Success {
			return 0, r
		}
		a.fence[a.cur] = v
		a.cur, a.off = (a.cur+1)%paramSegments, 0
		if f := a.fence[a.cur]; f != 0 {
			if r := l.waitFenceLocked(f); r != Success {
				return 0, r
			}
			a.fence[a.cur] = 0
		}
	}
	ga := a.ga + uint64(a.cur)*paramSegmentSize + a.off
	if err := l.d.WriteGA(ga, p); err != nil {
		return 0, l.fail(ErrUnknown, fmt.Errorf("cudadrv: storing %d bytes of launch parameters: %w", len(p), err))
	}
	a.off += n
	return ga, Success
}

// appendLaunchGrid appends LAUNCH_GRID (abi.CmdLaunchGrid, §6.10) on
// device stream id (§5.1: header flags bits 8-15), with the guest
// package's encoder (beside the other commands').
func appendLaunchGrid(b []byte, id uint8, kernel uint32, grid, block [3]uint32, shared uint32, params uint64, n uint32) []byte {
	start := len(b)
	b = guest.AppendLaunchGrid(b, kernel, grid, block, shared, params, n)
	binary.LittleEndian.PutUint16(b[start+2:], uint16(id)<<abi.CmdStreamShift) // the header's flags
	return b
}
