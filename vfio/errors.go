package vfio

import (
	"errors"

	"golang.org/x/sys/unix"
)

// Sentinel errors callers branch on. Each maps to the errno a server sends
// when it answers a request with that condition (see errnoOf).
var (
	// ErrInvalid: a request or argument is malformed (EINVAL).
	ErrInvalid = errors.New("vfio: invalid argument")
	// ErrUnsupported: the operation is not implemented (ENOTSUP).
	ErrUnsupported = errors.New("vfio: not supported")
	// ErrTooBig: a transfer exceeds the negotiated size (E2BIG).
	ErrTooBig = errors.New("vfio: transfer too large")
	// ErrOverlap: a DMA map overlaps an existing mapping (EEXIST, as the
	// specification requires for "a command to map over an existing region").
	ErrOverlap = errors.New("vfio: dma region overlaps an existing mapping")
	// ErrNotMapped: an address or range is not in any DMA mapping (ENOENT).
	ErrNotMapped = errors.New("vfio: dma address not mapped")
	// ErrNoFD: the address lies in a DMA mapping the client gave no
	// descriptor for, so it cannot be accessed through memory (EFAULT).
	ErrNoFD = errors.New("vfio: dma region has no file descriptor")
	// ErrPermission: the access is not allowed by the mapping's protection
	// (EPERM).
	ErrPermission = errors.New("vfio: dma access not permitted by mapping protection")
	// ErrFault: touching mapped memory faulted, e.g. the backing file was
	// truncated under the mapping (EFAULT).
	ErrFault = errors.New("vfio: fault accessing dma memory")
	// ErrNotNegotiated: a request came before VERSION (EINVAL).
	ErrNotNegotiated = errors.New("vfio: version not negotiated")
	// ErrClosed: the client is closed or its connection failed.
	ErrClosed = errors.New("vfio: client closed")
	// ErrMessageTimeout: a message begun on a connection was not complete
	// within the server's message timeout (ServerConfig.MessageTimeout),
	// so the server dropped the connection. Never sent as a reply.
	ErrMessageTimeout = errors.New("vfio: message not complete within the message timeout")
)

var sentinelErrnos = []struct {
	err   error
	errno unix.Errno
}{
	{ErrInvalid, unix.EINVAL},
	{ErrUnsupported, unix.ENOTSUP},
	{ErrTooBig, unix.E2BIG},
	{ErrOverlap, unix.EEXIST},
	{ErrNotMapped, unix.ENOENT},
	{ErrNoFD, unix.EFAULT},
	{ErrPermission, unix.EPERM},
	{ErrFault, unix.EFAULT},
	{ErrNotNegotiated, unix.EINVAL},
	{ErrShort, unix.EINVAL},
	{ErrMigStateLost, unix.EIO},
}

// errnoOf returns the errno to send for err: a syscall.Errno found in its
// chain as is, a sentinel's own errno, EINVAL for anything else.
func errnoOf(err error) unix.Errno {
	var en unix.Errno
	if errors.As(err, &en) && en != 0 {
		return en
	}
	for _, s := range sentinelErrnos {
		if errors.Is(err, s.err) {
			return s.errno
		}
	}
	return unix.EINVAL
}
