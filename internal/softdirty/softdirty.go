//go:build linux

// Package softdirty logs a process's writes to a shared file mapping with
// the kernel's soft-dirty page bits (Documentation/admin-guide/mm/
// soft-dirty.rst): writing 4 to /proc/PID/clear_refs clears them, and bit
// 55 of a page's /proc/PID/pagemap entry is set once the page is written.
//
// It is the fallback behind package uffdwp and is weaker: clearing and
// reading are separate steps, so Written never clears (its report is
// every page written since Arm, which is always a superset); clearing
// resets the bits of the whole process; a kernel built without
// CONFIG_MEM_SOFT_DIRTY accepts the clear and never sets a bit; and on
// shared memory a written page whose page-table entry is dropped and
// refaulted by a read loses its bit. SelfTest checks the last two in this
// process and fails on either, so a Log is only trusted where the kernel
// really keeps the bits. A Log is used by one goroutine at a time.
package softdirty

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/internal/uffdwp"
)

// pageSize is the unit of pagemap entries and of Written's offsets (the
// x86-64 base page, the vGPU's page: docs/device-abi.md §1).
const pageSize = uffdwp.PageSize

// pmSoftDirty is a pagemap entry's soft-dirty bit
// (Documentation/admin-guide/mm/pagemap.rst: bit 55).
const pmSoftDirty = 1 << 55

// clearSoftDirty is what clear_refs takes to clear the soft-dirty bits
// (Documentation/admin-guide/mm/soft-dirty.rst).
const clearSoftDirty = "4"

// ErrSelfTest says the kernel's soft-dirty bits cannot be trusted here.
var ErrSelfTest = errors.New("softdirty: self-test failed")

// Log is a soft-dirty write log of one file's mappings in one process.
type Log struct {
	pid     int
	pagemap *os.File
	ranges  []uffdwp.Range
	buf     []byte
}

// Open finds process pid's (0: this process's) writable shared mappings
// of f. Nothing is logged before Arm.
func Open(pid int, f *os.File) (*Log, error) {
	ranges, err := uffdwp.Mappings(pid, f)
	if err != nil {
		return nil, fmt.Errorf("softdirty: %w", err)
	}
	if len(ranges) == 0 {
		return nil, fmt.Errorf("softdirty: %w", uffdwp.ErrNoMapping)
	}
	pm, err := os.Open(proc(pid, "pagemap"))
	if err != nil {
		return nil, fmt.Errorf("softdirty: %w", err)
	}
	return &Log{pid: pid, pagemap: pm, ranges: ranges}, nil
}

func proc(pid int, name string) string {
	if pid == 0 {
		return "/proc/self/" + name
	}
	return fmt.Sprintf("/proc/%d/%s", pid, name)
}

// Arm clears the process's soft-dirty bits.
func (l *Log) Arm() error {
	if err := os.WriteFile(proc(l.pid, "clear_refs"), []byte(clearSoftDirty), 0); err != nil {
		return fmt.Errorf("softdirty: clearing: %w", err)
	}
	return nil
}

// Written appends the offsets (in pages of the file) of every page written
// since Arm, by mapping then ascending.
func (l *Log) Written(dst []int) ([]int, error) {
	for _, r := range l.ranges {
		n := int(r.Len / pageSize)
		if cap(l.buf) < 8*n {
			l.buf = make([]byte, 8*n)
		}
		buf := l.buf[:8*n]
		if _, err := l.pagemap.ReadAt(buf, int64(r.Addr/pageSize*8)); err != nil {
			return dst, fmt.Errorf("softdirty: reading pagemap: %w", err)
		}
		for i := range n {
			if binary.NativeEndian.Uint64(buf[8*i:])&pmSoftDirty != 0 {
				dst = append(dst, int(r.Off/pageSize)+i)
			}
		}
	}
	return dst, nil
}

// Close releases the log's descriptor.
func (l *Log) Close() error {
	if err := l.pagemap.Close(); err != nil {
		return fmt.Errorf("softdirty: %w", err)
	}
	return nil
}

// SelfTest checks once per process, on a scratch memfd of two pages in
// this process (whose soft-dirty bits it clears), that a written page is
// reported, an unwritten one is not, and a written page whose page-table
// entry was dropped (MADV_DONTNEED) and refaulted by a read is still
// reported. A failure wraps ErrSelfTest.
var SelfTest = sync.OnceValue(selfTest)

func selfTest() error {
	fd, err := unix.MemfdCreate("gmig-softdirty-selftest", unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("softdirty: self-test: %w", err)
	}
	f := os.NewFile(uintptr(fd), "gmig-softdirty-selftest")
	defer f.Close()
	if err := f.Truncate(2 * pageSize); err != nil {
		return fmt.Errorf("softdirty: self-test: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, 2*pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("softdirty: self-test: %w", err)
	}
	defer unix.Munmap(mem)
	mem[0], mem[pageSize] = 1, 1
	l, err := Open(0, f)
	if err != nil {
		return err
	}
	defer l.Close()
	if err := l.Arm(); err != nil {
		return err
	}
	mem[1] = 2
	got, err := l.Written(nil)
	if err != nil {
		return err
	}
	if len(got) != 1 || got[0] != 0 {
		return fmt.Errorf("%w: wrote page 0, the bits say %v (a kernel without CONFIG_MEM_SOFT_DIRTY accepts the clear and tracks nothing)", ErrSelfTest, got)
	}
	mem[pageSize+1] = 2
	if err := unix.Madvise(mem[pageSize:], unix.MADV_DONTNEED); err != nil {
		return fmt.Errorf("softdirty: self-test: %w", err)
	}
	_ = mem[pageSize+1] // refault by a read
	if got, err = l.Written(nil); err != nil {
		return err
	} else if len(got) != 2 {
		return fmt.Errorf("%w: a written page whose page-table entry was dropped and refaulted by a read lost its bit (pages %v)", ErrSelfTest, got)
	}
	return nil
}
