//go:build linux

package uffdwp

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/internal/ptinject"
)

// PageSize is the unit of Written's page offsets: the x86-64 base page,
// which is also the vGPU's page (docs/device-abi.md §1). Huge pages come
// back as the 4 KiB pages they hold.
const PageSize = 4096

// ErrUnsupported says the kernel lacks what a write log needs (userfaultfd,
// its asynchronous write-protect mode, or PAGEMAP_SCAN: Linux 6.7 or later
// with CONFIG_USERFAULTFD and CONFIG_PTE_MARKER_UFFD_WP).
var ErrUnsupported = errors.New("uffdwp: the kernel cannot log writes (needs userfaultfd WP_ASYNC and PAGEMAP_SCAN, Linux 6.7+)")

// ErrNoMapping says the process maps no writable part of the file.
var ErrNoMapping = errors.New("uffdwp: the process does not map the file writable")

// ErrLost says the log can no longer be trusted: a mapping it armed was
// replaced or unregistered, or the process maps the file somewhere new.
// Every page must then be treated as written.
var ErrLost = errors.New("uffdwp: write log lost")

// ErrSelfTest says the self-test saw the log miss a write or report a
// page nobody wrote.
var ErrSelfTest = errors.New("uffdwp: self-test failed")

// Range is one mapping of the logged file in the process: Len bytes at
// Addr, which map the file from offset Off.
type Range struct {
	Addr uint64
	Len  uint64
	Off  uint64
}

// Log is a write log of one file's mappings in one process. Its methods
// must not run concurrently with each other.
type Log struct {
	pid     int // 0: this process
	uffd    int
	pagemap *os.File
	dev     uint64 // the file's identity, to find new mappings of it
	ino     uint64
	ranges  []Range        // the mappings logged
	left    []Range        // mappings of the file left out (Exclude)
	armed   bool           // Arm ran: the ranges are fixed
	pieces  []piece        // the ranges cut for the workers (splitRanges)
	workers int            // goroutines a read spreads its walk over
	vecs    [][]pageRegion // one PAGEMAP_SCAN buffer per worker
	found   [][]int        // one output per piece of a read, reused
}

// Open registers every writable shared mapping of f in process pid (0 or
// os.Getpid(): this process) for asynchronous write protection. Nothing is
// logged before Arm. For another process the userfaultfd is created in
// one of its threads by ptrace injection (package ptinject, whose
// sentinel errors come back wrapped).
func Open(pid int, f *os.File) (*Log, error) {
	if pid == os.Getpid() {
		pid = 0
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("uffdwp: %w", err)
	}
	l := &Log{pid: pid, uffd: -1, dev: st.Dev, ino: st.Ino, workers: runtime.GOMAXPROCS(0)}
	var err error
	if l.ranges, err = mappings(pid, st.Dev, st.Ino); err != nil {
		return nil, err
	}
	if len(l.ranges) == 0 {
		return nil, fmt.Errorf("%w (pid %d)", ErrNoMapping, pid)
	}
	l.pieces = splitRanges(l.ranges, l.workers, minPiece)
	if l.pagemap, err = os.Open(l.proc("pagemap")); err != nil {
		return nil, fmt.Errorf("uffdwp: %w", err)
	}
	if err := l.open(); err != nil {
		l.Close()
		return nil, err
	}
	return l, nil
}

// proc is the path of a file of the process's /proc directory.
func (l *Log) proc(name string) string { return procPath(l.pid, name) }

// procPath is the path of a file of process pid's /proc directory (0:
// this process).
func procPath(pid int, name string) string {
	if pid == 0 {
		return "/proc/self/" + name
	}
	return fmt.Sprintf("/proc/%d/%s", pid, name)
}

// open creates the userfaultfd, enables the features and registers the
// ranges.
func (l *Log) open() error {
	flags := unix.O_CLOEXEC | uffdUserModeOnly
	var err error
	if l.pid == 0 {
		fd, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, uintptr(flags), 0, 0)
		if errno != 0 {
			return fmt.Errorf("%w: userfaultfd: %v", ErrUnsupported, errno)
		}
		l.uffd = int(fd)
	} else if l.uffd, err = ptinject.Userfaultfd(l.pid, flags); err != nil {
		if errors.Is(err, unix.ENOSYS) {
			return fmt.Errorf("%w: %v", ErrUnsupported, err)
		}
		return fmt.Errorf("uffdwp: %w", err)
	}
	api := uffdioAPI{API: uffdAPI, Features: wantFeatures}
	if err := uffdAPIIoctl(l.uffd, &api); err != nil {
		return fmt.Errorf("%w: UFFDIO_API: %v", ErrUnsupported, err)
	}
	if api.Features&wantFeatures != wantFeatures {
		return fmt.Errorf("%w: features %#x lack %#x", ErrUnsupported, api.Features, wantFeatures&^api.Features)
	}
	for _, r := range l.ranges {
		reg := uffdioRegister{Start: r.Addr, Len: r.Len, Mode: registerModeWP}
		if err := uffdRegisterIoctl(l.uffd, &reg); err != nil {
			return fmt.Errorf("uffdwp: registering %#x+%#x of pid %d: %w", r.Addr, r.Len, l.pid, err)
		}
	}
	return nil
}

// Ranges returns the mappings the log covers.
func (l *Log) Ranges() []Range { return slices.Clone(l.ranges) }

// Arm write-protects every page of the ranges: from now on a write to one
// is logged. Protect first, then read: a page read for sending after Arm
// returns and written after that read is logged.
func (l *Log) Arm() error {
	l.armed = true
	errs := make([]error, len(l.pieces))
	l.eachPiece(func(_, i int) {
		_, errs[i] = l.walk(l.pieces[i], scanWPMatching|scanCheckWPAsync, nil, nil)
	})
	for _, err := range errs {
		if err != nil {
			return l.scanError("arming", err)
		}
	}
	return nil
}

// Written appends to dst the offsets (in PageSize pages of the file) of
// the pages written since Arm or the last Written, and write-protects
// them again in the same pass, for the next round. With several mappings
// of the file a page may come more than once; the order is by mapping,
// then ascending.
func (l *Log) Written(dst []int) ([]int, error) {
	return l.read(dst, true)
}

// Peek is Written without starting a new round: it appends the same
// pages but changes no page table, so they stay logged and the next
// Written or Peek reports them again. It is the cheaper read for the last
// look at memory nothing writes any more (a migration's stop phase): no
// page is protected again, so no TLB flush and no invalidation of another
// MMU's view of the range (KVM's) is asked for.
func (l *Log) Peek(dst []int) ([]int, error) {
	return l.read(dst, false)
}

// scanError wraps a PAGEMAP_SCAN failure: EPERM is CHECK_WPASYNC's word
// that a range is no longer registered.
func (l *Log) scanError(what string, err error) error {
	if errors.Is(err, unix.EPERM) {
		return fmt.Errorf("%w: %s: a mapping is no longer registered (%v)", ErrLost, what, err)
	}
	if errors.Is(err, unix.ENOTTY) || errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("%w: PAGEMAP_SCAN: %v", ErrUnsupported, err)
	}
	return fmt.Errorf("uffdwp: %s: %w", what, err)
}

// checkMappings fails with ErrLost when the process maps the file
// anywhere the log did not register.
func (l *Log) checkMappings() error {
	now, err := mappings(l.pid, l.dev, l.ino)
	if err != nil {
		return err
	}
	for _, r := range now {
		if !slices.Contains(l.ranges, r) && !slices.Contains(l.left, r) {
			return fmt.Errorf("%w: pid %d maps the file at %#x+%#x, which is not armed", ErrLost, l.pid, r.Addr, r.Len)
		}
	}
	return nil
}

// Close unregisters the ranges (closing the userfaultfd does) and
// releases the log's descriptors. Pages stay as they are; the next write
// to a protected one takes a minor fault and goes on.
func (l *Log) Close() error {
	var errs []error
	if l.uffd >= 0 {
		errs = append(errs, unix.Close(l.uffd))
		l.uffd = -1
	}
	if l.pagemap != nil {
		errs = append(errs, l.pagemap.Close())
		l.pagemap = nil
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("uffdwp: closing: %w", err)
	}
	return nil
}

// Mappings lists process pid's (0: this process's) writable shared
// mappings of f.
func Mappings(pid int, f *os.File) ([]Range, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return nil, fmt.Errorf("uffdwp: %w", err)
	}
	return mappings(pid, st.Dev, st.Ino)
}

// mappings lists process pid's writable shared mappings of the file
// (dev, ino) from /proc/PID/maps (proc(5): "address perms offset dev
// inode pathname").
func mappings(pid int, dev, ino uint64) ([]Range, error) {
	path := procPath(pid, "maps")
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("uffdwp: %w", err)
	}
	defer f.Close()
	var out []Range
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var lo, hi, off uint64
		var perms string
		var major, minor uint32
		var inode uint64
		if _, err := fmt.Sscanf(sc.Text(), "%x-%x %s %x %x:%x %d", &lo, &hi, &perms, &off, &major, &minor, &inode); err != nil {
			continue
		}
		if inode != ino || unix.Mkdev(major, minor) != dev || !strings.HasPrefix(perms[1:], "w") || perms[3] != 's' {
			continue
		}
		out = append(out, Range{Addr: lo, Len: hi - lo, Off: off})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("uffdwp: reading %s: %w", path, err)
	}
	return out, nil
}

// SelfTest checks, once per process, that write logging works on this
// kernel: a scratch memfd of four pages in this process, two populated and
// two never touched, armed; one byte written to a populated and an
// unpopulated page must come back as exactly those two pages, and a
// second read with no writes as none. A failure wraps ErrSelfTest or
// ErrUnsupported.
var SelfTest = sync.OnceValue(selfTest)

func selfTest() error {
	fd, err := unix.MemfdCreate("gmig-uffdwp-selftest", unix.MFD_CLOEXEC)
	if err != nil {
		return fmt.Errorf("uffdwp: self-test: %w", err)
	}
	f := os.NewFile(uintptr(fd), "gmig-uffdwp-selftest")
	defer f.Close()
	const pages = 4
	if err := f.Truncate(pages * PageSize); err != nil {
		return fmt.Errorf("uffdwp: self-test: %w", err)
	}
	mem, err := unix.Mmap(fd, 0, pages*PageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("uffdwp: self-test: %w", err)
	}
	defer unix.Munmap(mem)
	mem[0], mem[PageSize] = 1, 1 // pages 0 and 1 populated; 2 and 3 never touched
	l, err := Open(0, f)
	if err != nil {
		return err
	}
	defer l.Close()
	if err := l.Arm(); err != nil {
		return err
	}
	mem[PageSize+123], mem[3*PageSize+4095] = 7, 7
	got, err := l.Written(nil)
	if err != nil {
		return err
	}
	if !slices.Equal(got, []int{1, 3}) {
		return fmt.Errorf("%w: wrote pages [1 3], the log says %v", ErrSelfTest, got)
	}
	if got, err = l.Written(nil); err != nil {
		return err
	} else if len(got) != 0 {
		return fmt.Errorf("%w: nothing written, the log says %v", ErrSelfTest, got)
	}
	return nil
}
