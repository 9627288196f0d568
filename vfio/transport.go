package vfio

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"runtime"
	"time"

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
//
// A transport with a message timeout (the server's) bounds each message,
// never the silence between messages: recv blocks without limit for a
// message's first byte, then arms a read deadline for the rest of it
// (header, payload, descriptors); send arms a write deadline for the whole
// message, so a peer that stops reading cannot hold the sender either.

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
	// msgTimeout bounds one message once begun (see above); 0: no
	// deadlines, as on the client's side.
	msgTimeout time.Duration
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

// timeoutError is a message that did not complete within the transport's
// message timeout: received in part (op "receiving"), or sent in part
// because the peer stopped reading (op "sending"). The connection is then
// unusable: the stream is cut mid-message.
type timeoutError struct {
	op       string
	hdr      Header // valid when hdrKnown
	hdrKnown bool
	done     int // bytes of the message moved before the deadline
	limit    time.Duration
}

func (e *timeoutError) Error() string {
	if !e.hdrKnown {
		return fmt.Sprintf("vfio: %s a message: %d of the %d header bytes within %v", e.op, e.done, HeaderSize, e.limit)
	}
	return fmt.Sprintf("vfio: %s %s (id %d): %d of %d bytes within %v",
		e.op, CommandName(e.hdr.Command), e.hdr.ID, e.done, e.hdr.Size, e.limit)
}

func (e *timeoutError) Unwrap() error { return ErrMessageTimeout }

// armRead starts the read deadline of a message whose first byte has
// arrived; disarmRead clears it once the message is read (or abandoned).
func (t *transport) armRead() bool {
	if t.msgTimeout <= 0 {
		return false
	}
	t.conn.SetReadDeadline(time.Now().Add(t.msgTimeout))
	return true
}

func (t *transport) disarmRead() { t.conn.SetReadDeadline(time.Time{}) }

// timedOut turns err into a *timeoutError when it is the expiry of a
// deadline this transport armed.
func (t *transport) timedOut(err error, armed bool, op string, hdr *Header, done int) error {
	if !armed || !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	e := &timeoutError{op: op, done: done, limit: t.msgTimeout}
	if hdr != nil {
		e.hdr, e.hdrKnown = *hdr, true
	}
	return e
}

// recv reads one message. A message larger than maxSize is read and
// discarded in bounded chunks and reported as a *frameError (E2BIG), as is a
// size below the header's and a control-message overflow; the returned
// message then carries the header (and no descriptors). A message not
// complete within the message timeout is a *timeoutError. Any other error
// means the connection is gone; io.EOF means it closed between messages.
func (t *transport) recv(maxSize uint32) (*message, error) {
	m := &message{}
	// The first byte may take any time: a client idles between messages.
	n, trunc, err := t.readOnce(t.hdr[:], &m.fds)
	switch {
	case err != nil:
		m.closeFDs()
		return nil, err
	case n == 0: // a stream socket's recvmsg returns 0 at end of stream
		m.closeFDs()
		return nil, io.EOF
	}
	armed := t.armRead()
	if armed {
		defer t.disarmRead()
	}
	k, trunc2, err := t.readFull(t.hdr[n:], &m.fds)
	if err != nil {
		m.closeFDs()
		return nil, t.timedOut(unexpectedEOF(err), armed, "receiving", nil, n+k)
	}
	trunc = trunc || trunc2
	m.hdr, _ = DecodeHeader(t.hdr[:])
	switch {
	case m.hdr.Size < HeaderSize:
		m.closeFDs()
		return m, &frameError{unix.EINVAL, fmt.Sprintf("message size %d below header size", m.hdr.Size)}
	case m.hdr.Size > maxSize:
		m.closeFDs()
		if k, err := t.discard(m.hdr.Size - HeaderSize); err != nil {
			return nil, t.timedOut(err, armed, "receiving", &m.hdr, HeaderSize+k)
		}
		return m, &frameError{unix.E2BIG, fmt.Sprintf("message size %d above limit %d", m.hdr.Size, maxSize)}
	}
	m.payload = make([]byte, m.hdr.Size-HeaderSize)
	k, trunc2, err = t.readFull(m.payload, &m.fds)
	if err != nil {
		m.closeFDs()
		return nil, t.timedOut(unexpectedEOF(err), armed, "receiving", &m.hdr, HeaderSize+k)
	}
	if trunc || trunc2 {
		m.closeFDs()
		return m, &frameError{unix.EINVAL, fmt.Sprintf("more than %d descriptors", maxMsgFDs)}
	}
	return m, nil
}

// readOnce is one recvmsg into b, appending any descriptors received to
// *fds; k == 0 with a nil error is the end of the stream. trunc reports
// that the kernel dropped descriptors for lack of room.
func (t *transport) readOnce(b []byte, fds *[]*os.File) (k int, trunc bool, err error) {
	k, oobn, flags, _, err := t.conn.ReadMsgUnix(b, t.oob)
	if oobn > 0 {
		*fds = append(*fds, parseRights(t.oob[:oobn])...)
	}
	if k < 0 { // a failed recvmsg's -1, passed on by net.UnixConn
		k = 0
	}
	return k, flags&unix.MSG_CTRUNC != 0, err
}

// readFull fills b, appending any descriptors received to *fds. trunc
// reports that the kernel dropped descriptors for lack of room.
func (t *transport) readFull(b []byte, fds *[]*os.File) (n int, trunc bool, err error) {
	for n < len(b) {
		k, tr, err := t.readOnce(b[n:], fds)
		trunc = trunc || tr
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

// discard reads and drops n bytes, closing any descriptors among them, and
// returns how many it read.
func (t *transport) discard(n uint32) (int, error) {
	buf := make([]byte, min(n, discardChunk))
	done := 0
	for n > 0 {
		var fds []*os.File
		k, _, err := t.readFull(buf[:min(n, uint32(len(buf)))], &fds)
		closeFiles(fds)
		done += k
		if err != nil {
			return done, unexpectedEOF(err)
		}
		n -= uint32(k)
	}
	return done, nil
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
// attached to its first byte. With a message timeout, a peer that has not
// taken the whole message within it gets a *timeoutError.
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
	armed := t.msgTimeout > 0
	if armed {
		t.conn.SetWriteDeadline(time.Now().Add(t.msgTimeout))
		defer t.conn.SetWriteDeadline(time.Time{})
	}
	n, _, err := t.conn.WriteMsgUnix(frame, oob, nil)
	runtime.KeepAlive(fds)
	if err == nil && n < len(frame) {
		var k int
		k, err = t.conn.Write(frame[n:])
		n += k
	}
	if err != nil {
		if armed && errors.Is(err, os.ErrDeadlineExceeded) {
			return t.timedOut(err, armed, "sending", &h, n)
		}
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
