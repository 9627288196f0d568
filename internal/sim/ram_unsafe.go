package sim

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// newMemfd creates a shared-memory file of size bytes and maps it.
func newMemfd(name string, size uint64) (*os.File, []byte, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, nil, fmt.Errorf("sim: memfd_create: %w", err)
	}
	f := os.NewFile(uintptr(fd), name)
	if err := f.Truncate(int64(size)); err != nil {
		f.Close()
		return nil, nil, fmt.Errorf("sim: sizing guest RAM: %w", err)
	}
	mem, err := mapShared(f, 0, size)
	if err != nil {
		f.Close()
		return nil, nil, err
	}
	return f, mem, nil
}

// mapShared maps size bytes of f at offset, shared and writable.
func mapShared(f *os.File, offset, size uint64) ([]byte, error) {
	mem, err := unix.Mmap(int(f.Fd()), int64(offset), int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("sim: mmap of %d bytes at %#x: %w", size, offset, err)
	}
	return mem, nil
}

func unmap(mem []byte) error {
	if mem == nil {
		return nil
	}
	return unix.Munmap(mem)
}

// newEventfd creates a non-blocking eventfd the runtime poller can wait on.
func newEventfd(name string) (*os.File, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("sim: eventfd: %w", err)
	}
	return os.NewFile(uintptr(fd), name), nil
}

// reuseRAM maps an existing guest RAM file of size bytes through a duplicate
// of its descriptor.
func reuseRAM(f *os.File, size uint64) (*os.File, []byte, error) {
	fi, err := f.Stat()
	if err != nil {
		return nil, nil, fmt.Errorf("sim: guest RAM file: %w", err)
	}
	if uint64(fi.Size()) != size {
		return nil, nil, fmt.Errorf("sim: guest RAM file is %d bytes, want %d", fi.Size(), size)
	}
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return nil, nil, fmt.Errorf("sim: duplicating the guest RAM descriptor: %w", err)
	}
	dup := os.NewFile(uintptr(fd), f.Name())
	mem, err := mapShared(dup, 0, size)
	if err != nil {
		dup.Close()
		return nil, nil, err
	}
	return dup, mem, nil
}
