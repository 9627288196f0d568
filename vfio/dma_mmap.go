package vfio

// The memory-mapping side of DMATable: mmap, munmap and the fault-guarded
// copy. Everything that touches client memory as raw pages lives here.

import (
	"fmt"
	"os"
	"runtime/debug"

	"golang.org/x/sys/unix"
)

var pageSize = uint64(os.Getpagesize())

// mmapRegion maps m's window from f (MAP_SHARED, with m.prot). An offset
// that is not page aligned is handled by mapping from the page below. For a
// regular file (memfd included) the window must lie inside the file, since
// touching a page past its end would raise SIGBUS.
func mmapRegion(m *dmaMapping, f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("vfio: dma map %#x: descriptor: %w", m.iova, err)
	}
	prot := unix.PROT_NONE
	if m.prot&DMAProtRead != 0 {
		prot |= unix.PROT_READ
	}
	if m.prot&DMAProtWrite != 0 {
		prot |= unix.PROT_WRITE
	}
	lead := m.offset % pageSize
	var mapErr error
	ctlErr := rc.Control(func(fd uintptr) {
		var st unix.Stat_t
		if err := unix.Fstat(int(fd), &st); err != nil {
			mapErr = fmt.Errorf("vfio: dma map %#x: fstat: %w", m.iova, err)
			return
		}
		if st.Mode&unix.S_IFMT == unix.S_IFREG && (m.offset+m.size < m.offset || m.offset+m.size > uint64(st.Size)) {
			mapErr = fmt.Errorf("%w: dma map %#x: offset %#x size %#x beyond file size %#x",
				ErrInvalid, m.iova, m.offset, m.size, st.Size)
			return
		}
		raw, err := unix.Mmap(int(fd), int64(m.offset-lead), int(m.size+lead), prot, unix.MAP_SHARED)
		if err != nil {
			mapErr = fmt.Errorf("vfio: dma map %#x: mmap offset %#x size %#x: %w", m.iova, m.offset, m.size, err)
			return
		}
		m.raw = raw
		m.mem = raw[lead : lead+m.size : lead+m.size]
	})
	if ctlErr != nil {
		return fmt.Errorf("vfio: dma map %#x: descriptor: %w", m.iova, ctlErr)
	}
	return mapErr
}

// munmapRegion unmaps m's window, if it has one.
func munmapRegion(m *dmaMapping) {
	if m.raw != nil {
		// Munmap fails only for a slice mmap did not return.
		_ = unix.Munmap(m.raw)
	}
	m.raw, m.mem = nil, nil
}

// copyGuarded copies src to dst, turning a memory fault (SIGBUS from a file
// truncated under its mapping) into ErrFault instead of a crash.
func copyGuarded(dst, src []byte) (err error) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			err = fmt.Errorf("%w: %v", ErrFault, r)
		}
	}()
	copy(dst, src)
	return nil
}
