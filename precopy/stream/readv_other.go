//go:build !linux

package stream

import (
	"errors"
	"io"
	"syscall"
)

// socketOf finds no socket readv can read outside Linux: pages are read
// with plain reads.
func socketOf(io.Reader) (syscall.Conn, bool) { return nil, false }

func readv(syscall.Conn, [][]byte) (int, error) {
	return 0, errors.New("stream: readv is Linux only")
}
