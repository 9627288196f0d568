package cudadrv

import (
	"encoding/binary"
	"fmt"
)

// Copies and memsets. The vGPU has one ring, which runs every command in
// order: whatever stream a call names, its commands are ordered after
// everything submitted before (a stronger order than CUDA promises).
// Host↔device copies move bytes with the CPU after the commands queued
// before them retired, so the Async forms return when their copy is done
// (CUDA allows that for pageable host memory); device↔device copies and
// memsets are commands on the ring and the Async forms return at once.

// MemcpyHtoD is cuMemcpyHtoD_v2 (and, synchronously, cuMemcpyHtoDAsync_v2).
func (l *Lib) MemcpyHtoD(t Thread, dst uint64, src []byte) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.hostCopyLocked(t, dst, uint64(len(src))); r != Success {
		return r
	}
	if err := l.mem.Write(dst, src); err != nil {
		return l.fail(ErrInvalidValue, fmt.Errorf("cudadrv: copying %d bytes to %#x: %w", len(src), dst, err))
	}
	return Success
}

// MemcpyDtoH is cuMemcpyDtoH_v2 (and, synchronously, cuMemcpyDtoHAsync_v2).
func (l *Lib) MemcpyDtoH(t Thread, dst []byte, src uint64) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.hostCopyLocked(t, src, uint64(len(dst))); r != Success {
		return r
	}
	if err := l.mem.Read(src, dst); err != nil {
		return l.fail(ErrInvalidValue, fmt.Errorf("cudadrv: copying %d bytes from %#x: %w", len(dst), src, err))
	}
	return Success
}

// hostCopyLocked checks a host copy's device range and waits for the
// commands queued before it.
func (l *Lib) hostCopyLocked(t Thread, ga, n uint64) Result {
	if _, r := l.currentLocked(t); r != Success {
		return r
	}
	if n == 0 {
		return Success
	}
	if r := l.checkRangeLocked(ga, n); r != Success {
		return r
	}
	return l.syncLocked()
}

// MemcpyDtoD is cuMemcpyDtoD_v2 (async false) and cuMemcpyDtoDAsync_v2:
// one COPY command.
func (l *Lib) MemcpyDtoD(t Thread, dst, src, n uint64, s Handle, async bool) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.streamOpLocked(t, s); r != Success {
		return r
	}
	if n == 0 {
		return Success
	}
	if r := l.checkRangeLocked(dst, n); r != Success {
		return r
	}
	if r := l.checkRangeLocked(src, n); r != Success {
		return r
	}
	if r := l.submitLocked(l.d.Copy(dst, src, n)); r != Success {
		return r
	}
	if !async {
		return l.syncLocked()
	}
	return Success
}

// Memset is cuMemsetD8/D16/D32 (_v2) and their Async forms: count elements
// of width bytes (1, 2 or 4) at dst set to value. The 4-byte-aligned part
// is one FILL command; bytes before and after it (FILL works in whole
// 32-bit words) are stored with the CPU once earlier commands retired.
func (l *Lib) Memset(t Thread, dst uint64, value uint32, width int, count uint64, s Handle, async bool) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.streamOpLocked(t, s); r != Success {
		return r
	}
	var pattern uint32
	switch width {
	case 1:
		pattern = value & 0xff * 0x01010101
	case 2:
		pattern = value & 0xffff * 0x00010001
	case 4:
		pattern = value
	default:
		return ErrInvalidValue
	}
	n := count * uint64(width)
	if dst%uint64(width) != 0 {
		return ErrInvalidValue
	}
	if n == 0 {
		return Success
	}
	if r := l.checkRangeLocked(dst, n); r != Success {
		return r
	}
	lo, hi := (dst+3)&^3, (dst+n)&^3
	if lo >= hi {
		lo, hi = dst, dst // no whole word: all of it by CPU
	}
	if hi > lo {
		if r := l.submitLocked(l.d.Fill(lo, hi-lo, pattern)); r != Success {
			return r
		}
	}
	if edges := [][2]uint64{{dst, lo}, {max(hi, lo), dst + n}}; edges[0][1] > edges[0][0] || edges[1][1] > edges[1][0] {
		if r := l.syncLocked(); r != Success {
			return r
		}
		var word [4]byte
		binary.LittleEndian.PutUint32(word[:], pattern)
		for _, e := range edges {
			for ga := e[0]; ga < e[1]; ga++ {
				if err := l.mem.Write(ga, word[ga%4:ga%4+1]); err != nil {
					return l.fail(ErrInvalidValue, fmt.Errorf("cudadrv: setting %#x: %w", ga, err))
				}
			}
		}
	}
	if !async {
		return l.syncLocked()
	}
	return Success
}
