package pool

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// This file holds the pool's system calls: the reserved address range, each
// partition's sealed memfd, and mapping partitions into and out of the
// range.

// partitionSeals are the seals every partition memfd carries (memfd_create(2),
// fcntl(2) "File Sealing"): its size can never change, so no holder of the
// descriptor — a vfio-user client is one — can truncate it under gmigd's
// mapping (a SIGBUS in gmigd) or grow it; and no seal can be added or
// removed afterwards.
const partitionSeals = unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_SEAL

// reserve claims size bytes of address space that maps nothing: every
// access faults until a partition is mapped over part of it. MAP_NORESERVE
// because no memory is committed to it (mmap(2)).
func reserve(size uint64) ([]byte, error) {
	addr, err := unix.MmapPtr(-1, 0, nil, uintptr(size), unix.PROT_NONE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return nil, fmt.Errorf("pool: reserving %d bytes of address space: %w", size, err)
	}
	return unsafe.Slice((*byte)(addr), size), nil
}

// release unmaps the whole reserved range, partitions included.
func release(mem []byte) error {
	if err := unix.MunmapPtr(unsafe.Pointer(unsafe.SliceData(mem)), uintptr(len(mem))); err != nil {
		return fmt.Errorf("pool: unmapping the pool: %w", err)
	}
	return nil
}

// newPartitionFile creates a memfd of exactly size bytes, sealed with
// partitionSeals. It reads as zeros.
func newPartitionFile(size uint64) (*os.File, error) {
	fd, err := unix.MemfdCreate("gmig-partition", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("pool: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), "gmig-partition")
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		f.Close()
		return nil, fmt.Errorf("pool: sizing a partition memfd to %d bytes: %w", size, err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, partitionSeals); err != nil {
		f.Close()
		return nil, fmt.Errorf("pool: sealing a partition memfd: %w", err)
	}
	return f, nil
}

// mapPartition maps f, read-write and shared, over [off, off+size) of the
// reserved range mem, replacing what was there.
func mapPartition(mem []byte, off, size uint64, f *os.File) error {
	_, err := unix.MmapPtr(int(f.Fd()), 0, unsafe.Pointer(&mem[off]), uintptr(size),
		unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_FIXED)
	if err != nil {
		return fmt.Errorf("pool: mapping a partition at %#x: %w", off, err)
	}
	return nil
}

// mapLocal maps fresh private anonymous memory, read-write, over
// [off, off+size) of mem: a partition's device-local memory, which no file
// holds, so there is no descriptor to hand anyone. MAP_NORESERVE as the
// reservation: pages are committed as they are touched.
func mapLocal(mem []byte, off, size uint64) error {
	_, err := unix.MmapPtr(-1, 0, unsafe.Pointer(&mem[off]), uintptr(size), unix.PROT_READ|unix.PROT_WRITE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE|unix.MAP_FIXED)
	if err != nil {
		return fmt.Errorf("pool: mapping local memory at %#x: %w", off, err)
	}
	return nil
}

// discardLocal drops the pages of [off, off+size) of mem, a range of
// local memory (mapLocal's private anonymous mapping), with
// madvise(MADV_DONTNEED): for a private anonymous mapping the pages are
// freed at once and the range reads as zero-fill-on-demand memory after
// (madvise(2)). The alternatives do not fit: local memory is in no file,
// so there is no memfd to punch a hole in (fallocate(2)
// FALLOC_FL_PUNCH_HOLE), MADV_REMOVE refuses private mappings (EINVAL),
// and MADV_FREE frees only under memory pressure, leaving the pages
// counted against gmigd until then.
func discardLocal(mem []byte, off, size uint64) error {
	if err := unix.Madvise(mem[off:off+size], unix.MADV_DONTNEED); err != nil {
		return fmt.Errorf("pool: discarding %d bytes of local memory at %#x: %w", size, off, err)
	}
	return nil
}

// freeLocal lets the kernel take the pages of [off, off+size) of mem, a
// range of local memory, when it needs memory: madvise(MADV_FREE), which
// for a private anonymous mapping leaves each page mapped, with its bytes,
// until the kernel reclaims it; a write before that keeps the page (no
// fault), one after it faults in a zero page (madvise(2)).
func freeLocal(mem []byte, off, size uint64) error {
	if err := unix.Madvise(mem[off:off+size], unix.MADV_FREE); err != nil {
		return fmt.Errorf("pool: freeing %d bytes of local memory at %#x lazily: %w", size, off, err)
	}
	return nil
}

// unmapPartition puts [off, off+size) of mem back to reserved address
// space: the partition's pages leave gmigd's address space, and touching
// the range faults again.
func unmapPartition(mem []byte, off, size uint64) error {
	_, err := unix.MmapPtr(-1, 0, unsafe.Pointer(&mem[off]), uintptr(size), unix.PROT_NONE,
		unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE|unix.MAP_FIXED)
	if err != nil {
		return fmt.Errorf("pool: unmapping the partition at %#x: %w", off, err)
	}
	return nil
}
