package cudadrv

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Host memory the library allocates (cuMemAllocHost, cuMemHostAlloc):
// page-aligned anonymous mappings of the calling process. The vGPU cannot
// reach guest memory the program holds (only the library's DMA memory and
// graphics memory are the device's), so this memory is not pinned for the
// device and has no device address: copies from and to it are those of
// pageable memory, and CU_MEMHOSTALLOC_DEVICEMAP, which promises a device
// pointer, is refused.

// cuMemHostAlloc flags (cuda.h, CU_MEMHOSTALLOC_*).
const (
	hostAllocPortable      = 0x01
	hostAllocDeviceMap     = 0x02
	hostAllocWriteCombined = 0x04
	hostAllocKnown         = hostAllocPortable | hostAllocDeviceMap | hostAllocWriteCombined
)

// hostAlloc is a live host allocation.
type hostAlloc struct {
	buf   []byte
	flags uint32
}

// MemHostAlloc is cuMemHostAlloc (and cuMemAllocHost_v2, flags 0): n bytes
// of page-aligned host memory.
func (l *Lib) MemHostAlloc(t Thread, n uint64, flags uint32) ([]byte, Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, r := l.currentLocked(t); r != Success {
		return nil, r
	}
	if n == 0 || flags&^hostAllocKnown != 0 {
		return nil, ErrInvalidValue
	}
	if flags&hostAllocDeviceMap != 0 {
		return nil, l.fail(ErrNotSupported, fmt.Errorf("cudadrv: mapped host memory (CU_MEMHOSTALLOC_DEVICEMAP): the vGPU cannot reach a program's memory"))
	}
	buf, err := unix.Mmap(-1, 0, int(n), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, l.fail(ErrOutOfMemory, fmt.Errorf("cudadrv: allocating %d bytes of host memory: %w", n, err))
	}
	l.hosts[addressOf(buf)] = hostAlloc{buf: buf, flags: flags}
	return buf, Success
}

// MemFreeHost is cuMemFreeHost: p is the address MemHostAlloc returned.
func (l *Lib) MemFreeHost(p uintptr) Result {
	l.mu.Lock()
	defer l.mu.Unlock()
	if r := l.readyLocked(); r != Success {
		return r
	}
	h, ok := l.hosts[p]
	if !ok {
		return ErrInvalidValue
	}
	delete(l.hosts, p)
	if err := unix.Munmap(h.buf); err != nil {
		return l.fail(ErrUnknown, fmt.Errorf("cudadrv: freeing host memory at %#x: %w", p, err))
	}
	return Success
}

// MemHostGetDevicePointer is cuMemHostGetDevicePointer_v2: no host memory
// has a device address here (CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY is
// 0), so memory the library allocated answers CUDA_ERROR_NOT_SUPPORTED,
// any other address CUDA_ERROR_INVALID_VALUE.
func (l *Lib) MemHostGetDevicePointer(t Thread, p uintptr, flags uint32) (uint64, Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, r := l.currentLocked(t); r != Success {
		return 0, r
	}
	if flags != 0 {
		return 0, ErrInvalidValue
	}
	for base, h := range l.hosts {
		if p >= base && p < base+uintptr(len(h.buf)) {
			return 0, l.fail(ErrNotSupported, fmt.Errorf("cudadrv: host memory at %#x has no device address: the vGPU cannot reach a program's memory", p))
		}
	}
	return 0, ErrInvalidValue
}

// ctxAPIVersion is what cuCtxGetApiVersion answers: contexts of the _v2
// API of CUDA 3.2, which every implemented entry point is (cuda.h).
const ctxAPIVersion = 3020

// CtxGetAPIVersion is cuCtxGetApiVersion: h, or t's current context when
// h is 0.
func (l *Lib) CtxGetAPIVersion(t Thread, h Handle) (uint32, Result) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h == 0 {
		if _, r := l.currentLocked(t); r != Success {
			return 0, r
		}
		return ctxAPIVersion, Success
	}
	if r := l.readyLocked(); r != Success {
		return 0, r
	}
	if _, r := l.contextLocked(h); r != Success {
		return 0, r
	}
	return ctxAPIVersion, Success
}
