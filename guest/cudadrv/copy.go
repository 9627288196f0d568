package cudadrv

import (
	"encoding/binary"
	"fmt"
)

// Copies and memsets. The vGPU has one ring, which runs every command in
// order: whatever stream a call names, its commands are ordered after
// everything submitted before (a stronger order than CUDA promises).
// Host↔device copies of aperture memory move bytes with the CPU after the
// commands queued before them retired; those of device-local memory are
// staged (staging.go). Either way the Async forms return when their copy is
// done as cuMemcpyHtoD and cuMemcpyDtoH do (CUDA allows that for pageable
// host memory); device↔device copies and memsets are commands on the ring
// and the Async forms return at once. Device pointers are translated to
// graphics addresses by the allocation that holds them (memory.go).

// MemcpyHtoD is cuMemcpyHtoD_v2 (and, synchronously, cuMemcpyHtoDAsync_v2).
func (l *Lib) MemcpyHtoD(t Thread, dst uint64, src []byte) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, r := l.currentLocked(t); r != Success || len(src) == 0 {
		return r
	}
	ga, r := l.resolveLocked(dst, uint64(len(src)))
	if r != Success {
		return r
	}
	return l.writeLocked(ga, src)
}

// MemcpyDtoH is cuMemcpyDtoH_v2 (and, synchronously, cuMemcpyDtoHAsync_v2).
func (l *Lib) MemcpyDtoH(t Thread, dst []byte, src uint64) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, r := l.currentLocked(t); r != Success || len(dst) == 0 {
		return r
	}
	ga, r := l.resolveLocked(src, uint64(len(dst)))
	if r != Success {
		return r
	}
	return l.readLocked(ga, dst)
}

// writeLocked stores p at graphics address ga after the commands queued
// before: by CPU once they retired (aperture memory), or staged
// (device-local memory, staging.go).
func (l *Lib) writeLocked(ga uint64, p []byte) Result {
	if !l.mem.CPU() {
		return l.stageWriteLocked(ga, p)
	}
	if r := l.syncLocked(); r != Success {
		return r
	}
	if err := l.d.WriteGA(ga, p); err != nil {
		return l.fail(ErrInvalidValue, fmt.Errorf("cudadrv: copying %d bytes to %#x: %w", len(p), ga, err))
	}
	return Success
}

// readLocked loads len(p) bytes at graphics address ga once the commands
// queued before retired.
func (l *Lib) readLocked(ga uint64, p []byte) Result {
	if !l.mem.CPU() {
		return l.stageReadLocked(ga, p)
	}
	if r := l.syncLocked(); r != Success {
		return r
	}
	if err := l.d.ReadGA(ga, p); err != nil {
		return l.fail(ErrInvalidValue, fmt.Errorf("cudadrv: copying %d bytes from %#x: %w", len(p), ga, err))
	}
	return Success
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
	dga, r := l.resolveLocked(dst, n)
	if r != Success {
		return r
	}
	sga, r := l.resolveLocked(src, n)
	if r != Success {
		return r
	}
	if r := l.submitLocked(l.d.Copy(dga, sga, n)); r != Success {
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
// 32-bit words) are stored as a host copy is (writeLocked).
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
	ga, r := l.resolveLocked(dst, n)
	if r != Success {
		return r
	}
	lo, hi := (ga+3)&^3, (ga+n)&^3
	if lo >= hi {
		lo, hi = ga, ga // no whole word: all of it stored
	}
	if hi > lo {
		if r := l.submitLocked(l.d.Fill(lo, hi-lo, pattern)); r != Success {
			return r
		}
	}
	var word [4]byte
	binary.LittleEndian.PutUint32(word[:], pattern)
	for _, e := range [][2]uint64{{ga, lo}, {max(hi, lo), ga + n}} {
		if e[1] <= e[0] {
			continue
		}
		edge := make([]byte, 0, 3)
		for a := e[0]; a < e[1]; a++ {
			edge = append(edge, word[a%4])
		}
		if r := l.writeLocked(e[0], edge); r != Success {
			return r
		}
	}
	if !async {
		return l.syncLocked()
	}
	return Success
}
