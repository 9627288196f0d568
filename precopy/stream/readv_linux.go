package stream

import (
	"io"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// socketOf returns r as a socket that readv can read, if it is one: a
// TCP or UNIX connection (the connections gmigd migrates over, under TLS
// or not). Other readers (a TLS connection, a file, a pipe) are read with
// plain reads.
func socketOf(r io.Reader) (syscall.Conn, bool) {
	switch c := r.(type) {
	case *net.TCPConn:
		return c, true
	case *net.UnixConn:
		return c, true
	}
	return nil, false
}

// readv reads from c into bufs with one readv(2) once c is readable,
// through the runtime's poller, so c's read deadline interrupts it. It
// returns 0 and no error at EOF.
func readv(c syscall.Conn, bufs [][]byte) (int, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return 0, err
	}
	var n int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		for {
			n, rerr = unix.Readv(int(fd), bufs)
			if rerr != unix.EINTR {
				break
			}
		}
		return rerr != unix.EAGAIN
	})
	if err != nil {
		return 0, err
	}
	if rerr != nil {
		return 0, rerr
	}
	return n, nil
}
