package precopy

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"

	"github.com/gmig-dev/gmig/precopy/stream"
	"github.com/gmig-dev/gmig/vgpu"
)

// received is what Receive returned.
type received struct {
	rep Report
	err error
}

// receive runs Receive into v on its own goroutine; a success is
// delivered once the received local pages' host memory is given back
// (Options.Released), so tests can count what stays resident.
func receive(ctx context.Context, conn io.Reader, v *vgpu.VGPU, opts Options) <-chan received {
	ch := make(chan received, 1)
	var released chan struct{}
	if opts.Released == nil {
		released = make(chan struct{})
		opts.Released = func() { close(released) }
	}
	go func() {
		rep, err := Receive(ctx, conn, v, opts)
		if err == nil && released != nil {
			<-released // the local pages' host memory given back (in the background)
		}
		ch <- received{rep, err}
	}()
	return ch
}

// follower tracks where in a migration stream each written byte falls.
type follower struct {
	hdr      int // stream header bytes seen
	fh       [stream.FrameHeaderSize]byte
	nfh      int   // frame-header bytes seen
	plen     int64 // current payload length
	poff     int64 // payload bytes seen
	ncrc     int   // CRC bytes seen
	typ      stream.SectionType
	sections map[stream.SectionType]int // sections begun, by type
}

// span is a run of one write's bytes inside one section's payload.
type span struct {
	lo, hi  int                // p[lo:hi]
	typ     stream.SectionType // the section
	nth     int                // 1 for the first section of its type
	payload int64              // offset of p[lo] in the payload
}

// feed follows p and returns the payload spans in it.
func (f *follower) feed(p []byte) []span {
	if f.sections == nil {
		f.sections = map[stream.SectionType]int{}
	}
	var out []span
	for i := 0; i < len(p); {
		switch {
		case f.hdr < stream.HeaderSize:
			k := min(len(p)-i, stream.HeaderSize-f.hdr)
			f.hdr, i = f.hdr+k, i+k
		case f.nfh < stream.FrameHeaderSize:
			k := min(len(p)-i, stream.FrameHeaderSize-f.nfh)
			copy(f.fh[f.nfh:], p[i:i+k])
			f.nfh, i = f.nfh+k, i+k
			if f.nfh == stream.FrameHeaderSize {
				f.typ = stream.SectionType(f.fh[0])
				f.plen, f.poff = int64(binary.LittleEndian.Uint32(f.fh[4:])), 0
				f.sections[f.typ]++
			}
		case f.poff < f.plen:
			k := int(min(int64(len(p)-i), f.plen-f.poff))
			out = append(out, span{lo: i, hi: i + k, typ: f.typ, nth: f.sections[f.typ], payload: f.poff})
			f.poff, i = f.poff+int64(k), i+k
		default:
			k := min(len(p)-i, stream.FrameTrailerSize-f.ncrc)
			f.ncrc, i = f.ncrc+k, i+k
			if f.ncrc == stream.FrameTrailerSize {
				f.nfh, f.ncrc = 0, 0
			}
		}
	}
	return out
}

var errCut = errors.New("test: connection cut")

// faultConn is one end of a connection whose writes a test inspects: fault
// sees each write with the stream position and may return a replacement
// (a corrupted copy) or cut the connection (closed under both ends'
// feet; the write fails).
type faultConn struct {
	net.Conn
	mu    sync.Mutex
	f     follower
	off   int64
	fault func(off int64, p []byte, spans []span, f *follower) (q []byte, cut bool)
}

func (c *faultConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	spans := c.f.feed(p)
	q, cut := c.fault(c.off, p, spans, &c.f)
	c.off += int64(len(p))
	c.mu.Unlock()
	if cut {
		c.Conn.Close()
		return 0, errCut
	}
	if q == nil {
		q = p
	}
	return c.Conn.Write(q)
}

// CloseWrite passes a half-close through, as Rollback uses it.
func (c *faultConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
