package vfio

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// Transport: whole vfio-user messages on a UNIX stream socket, with file
// descriptors as SCM_RIGHTS ancillary data (vfio-user.rst, "Socket"; "On
// AF_UNIX sockets, the file descriptor must be passed as SCM_RIGHTS").
//
// Reads never go past the end of the current message, so descriptors that
// arrive are always those of the message being read. Every descriptor
// received becomes an *os.File owned by the message; whatever the handler
// does not take is closed.

// maxMsgFDs is how many descriptors one message may carry to us (advertised
// as max_msg_fds; QEMU's client caps the value at 16, VFIO_USER_MAX_MAX_FDS).
const maxMsgFDs = 16

// discardChunk bounds the buffer used to skip an oversized payload.
const discardChunk = 64 << 10

// message is one received message.
type message struct {
	hdr     Header
	payload []byte     // hdr.Size - HeaderSize bytes
	fds     []*os.File // entries set to nil once taken
}

// takeFDs hands the message's descriptors to the caller.
func (m *message) takeFDs() []*os.File {
	fds := m.fds
	m.fds = nil
	return fds
}

// closeFDs closes the descriptors nobody took.
func (m *message) closeFDs() {
	closeFiles(m.fds)
	m.fds = nil
}

func closeFiles(fds []*os.File) {
	for _, f := range fds {
		if f != nil {
			f.Close()
		}
	}
}

// transport reads and writes messages on one connection. It is not safe for
// concurrent use; the server's request loop and the client's mutex serialize
// it.
type transport struct {
	conn *net.UnixConn
	oob  []byte
	hdr  [HeaderSize]byte
}

func newTransport(c *net.UnixConn) *transport {
	return &transport{conn: c, oob: make([]byte, unix.CmsgSpace(maxMsgFDs*4))}
}

// frameError is a framing problem with one message that the peer should hear
// about as errno while the connection stays usable.
type frameError struct {
	errno unix.Errno
	why   string
}

func (e *frameError) Error() string { return "vfio: " + e.why }
func (e *frameError) Unwrap() error { return e.errno }

// recv reads one message. A message larger than maxSize is read and
// discarded in bounded chunks and reported as a *frameError (E2BIG), as is a
// size below the header's and a control-message overflow; the returned
// message then carries the header (and no descriptors). Any other error means
// the connection is gone; io.EOF means it closed between messages.
func (t *transport) recv(maxSize uint32) (*message, error) {
	m := &message{}
	n, trunc, err := t.readFull(t.hdr[:], &m.fds)
	if err != nil {
		m.closeFDs()
		if n == 0 && errors.Is(err, io.EOF) {
			return nil, io.EOF
		}
		return nil, err
	}
	m.hdr, _ = DecodeHeader(t.hdr[:])
	switch {
	case m.hdr.Size < HeaderSize:
		m.closeFDs()
		return m, &frameError{unix.EINVAL, fmt.Sprintf("message size %d below header size", m.hdr.Size)}
	case m.hdr.Size > maxSize:
		m.closeFDs()
		if err := t.discard(m.hdr.Size - HeaderSize); err != nil {
			return nil, err
		}
		return m, &frameError{unix.E2BIG, fmt.Sprintf("message size %d above limit %d", m.hdr.Size, maxSize)}
	}
	m.payload = make([]byte, m.hdr.Size-HeaderSize)
	_, trunc2, err := t.readFull(m.payload, &m.fds)
	if err != nil {
		m.closeFDs()
		return nil, unexpectedEOF(err)
	}
	if trunc || trunc2 {
		m.closeFDs()
		return m, &frameError{unix.EINVAL, fmt.Sprintf("more than %d descriptors", maxMsgFDs)}
	}
	return m, nil
}

// readFull fills b, appending any descriptors received to *fds. trunc
// reports that the kernel dropped descriptors for lack of room.
func (t *transport) readFull(b []byte, fds *[]*os.File) (n int, trunc bool, err error) {
	for n < len(b) {
		k, oobn, flags, _, err := t.conn.ReadMsgUnix(b[n:], t.oob)
		if oobn > 0 {
			*fds = append(*fds, parseRights(t.oob[:oobn])...)
		}
		if flags&unix.MSG_CTRUNC != 0 {
			trunc = true
		}
		n += k
		if err != nil {
			if n > 0 {
				err = unexpectedEOF(err)
			}
			return n, trunc, err
		}
		if k == 0 { // a stream socket's recvmsg returns 0 at end of stream
			if n == 0 {
				return 0, trunc, io.EOF
			}
			return n, trunc, io.ErrUnexpectedEOF
		}
	}
	return n, trunc, nil
}

// discard reads and drops n bytes, closing any descriptors among them.
func (t *transport) discard(n uint32) error {
	buf := make([]byte, min(n, discardChunk))
	for n > 0 {
		var fds []*os.File
		k, _, err := t.readFull(buf[:min(n, uint32(len(buf)))], &fds)
		closeFiles(fds)
		if err != nil {
			return unexpectedEOF(err)
		}
		n -= uint32(k)
	}
	return nil
}

func unexpectedEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// parseRights turns SCM_RIGHTS control messages into files. Malformed
// control data yields no files (the kernel never sends it).
func parseRights(oob []byte) []*os.File {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil
	}
	var files []*os.File
	for i := range msgs {
		fds, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			continue
		}
		for _, fd := range fds {
			files = append(files, os.NewFile(uintptr(fd), "vfio-user-fd"))
		}
	}
	return files
}

// newFrame returns a buffer for an outgoing message: HeaderSize bytes
// reserved for the header, capacity for payloadCap more.
func newFrame(payloadCap int) []byte {
	return make([]byte, HeaderSize, HeaderSize+payloadCap)
}

// send writes frame (header space plus payload) with h filled in and fds
// attached to its first byte.
func (t *transport) send(h Header, frame []byte, fds []*os.File) error {
	h.Size = uint32(len(frame))
	h.Append(frame[:0])
	var oob []byte
	if len(fds) > 0 {
		ints := make([]int, 0, len(fds))
		for _, f := range fds {
			fd, err := rawFD(f)
			if err != nil {
				return err
			}
			ints = append(ints, fd)
		}
		oob = unix.UnixRights(ints...)
	}
	n, _, err := t.conn.WriteMsgUnix(frame, oob, nil)
	runtime.KeepAlive(fds)
	if err == nil && n < len(frame) {
		_, err = t.conn.Write(frame[n:])
	}
	if err != nil {
		return fmt.Errorf("vfio: sending %s: %w", CommandName(h.Command), err)
	}
	return nil
}

// rawFD returns f's descriptor without switching it to blocking mode (which
// (*os.File).Fd does, and which would be shared with the peer's copy).
func rawFD(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return -1, fmt.Errorf("vfio: descriptor of %s: %w", f.Name(), err)
	}
	fd := -1
	if err := rc.Control(func(u uintptr) { fd = int(u) }); err != nil {
		return -1, fmt.Errorf("vfio: descriptor of %s: %w", f.Name(), err)
	}
	return fd, nil
}
