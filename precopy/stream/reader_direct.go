package stream

import (
	"crypto/tls"
	"io"
)

// readInto fills each of bufs in turn from the stream, pages straight
// into their place in the destination: first from what the Reader has
// buffered, then from the underlying reader itself — with one readv(2)
// for all of bufs where it is a socket (socketOf), with a read into each
// where it is a TLS connection (which has its own buffer) — so that no
// page is copied through the Reader's buffer. Any other reader is read
// through the buffer, as it may make a system call of every read. bufs'
// elements are resliced as they fill.
func (r *Reader) readInto(bufs [][]byte) error {
	for len(bufs) > 0 && r.br.Buffered() > 0 {
		k, _ := r.br.Read(bufs[0]) // what is buffered: no read below it
		r.off += int64(k)
		bufs = advance(bufs, k)
	}
	if len(bufs) == 0 {
		return nil
	}
	if c, ok := socketOf(r.raw); ok {
		for len(bufs) > 0 {
			k, err := readv(c, bufs)
			r.off += int64(k)
			if err != nil {
				return err
			}
			if k == 0 {
				return io.ErrUnexpectedEOF
			}
			bufs = advance(bufs, k)
		}
		return nil
	}
	src := io.Reader(r.br) // a reader whose small reads may be system calls
	if _, ok := r.raw.(*tls.Conn); ok {
		src = r.raw // decrypts a record at a time and copies from it
	}
	for _, b := range bufs {
		k, err := io.ReadFull(src, b)
		r.off += int64(k)
		if err != nil {
			return eofIsUnexpected(err)
		}
	}
	return nil
}

// advance drops the first k bytes of bufs.
func advance(bufs [][]byte, k int) [][]byte {
	for k > 0 && len(bufs) > 0 {
		if k < len(bufs[0]) {
			bufs[0] = bufs[0][k:]
			return bufs
		}
		k -= len(bufs[0])
		bufs = bufs[1:]
	}
	for len(bufs) > 0 && len(bufs[0]) == 0 {
		bufs = bufs[1:]
	}
	return bufs
}
