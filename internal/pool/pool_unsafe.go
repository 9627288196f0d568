package pool

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// This file holds the pool's system calls: memfd creation, mapping, and
// hole punching.

// createMapped creates a memfd of size bytes and maps it shared, read-write.
func createMapped(size uint64) (*os.File, []byte, error) {
	fd, err := unix.MemfdCreate("gmig-pool", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("pool: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "gmig-pool")
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("pool: ftruncate memfd to %d bytes: %w", size, err)
	}
	mem, err := unix.Mmap(fd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("pool: mmap %d bytes: %w", size, err)
	}
	return f, mem, nil
}

// unmap releases a mapping made by createMapped.
func unmap(mem []byte) error {
	if err := unix.Munmap(mem); err != nil {
		return fmt.Errorf("pool: munmap: %w", err)
	}
	return nil
}

// punchHole releases the backing pages of [off, off+size) of f; the range
// reads as zeros afterwards, through every mapping of f.
func punchHole(f *os.File, off, size uint64) error {
	return unix.Fallocate(int(f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, int64(off), int64(size))
}
