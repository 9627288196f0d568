package vfio

import (
	"errors"
	"fmt"
	"net"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Client is a vfio-user client (the role QEMU plays), for tests, the
// benchmark and the guest simulator. It is safe for concurrent use: each
// request holds the connection until its reply arrives.
type Client struct {
	mu      sync.Mutex
	conn    *net.UnixConn
	t       *transport
	nextID  uint16
	broken  error // set once the connection failed
	maxXfer uint32
	maxFDs  int
	multi   bool
}

// clientCaps is what Dial proposes, the values QEMU 11.1 proposes.
var clientCaps = Capabilities{
	MaxMsgFDs:       ptr(uint32(maxMsgFDs)),
	MaxDataXferSize: ptr(uint32(DefaultMaxDataXfer)),
	PgSizes:         ptr(uint64(defaultPgSizes)),
	MaxDMAMaps:      ptr(uint32(defaultMaxDMAMaps)),
	WriteMultiple:   ptr(true),
}

// maxRegionInfoArgsz bounds the region info reply a client accepts.
const maxRegionInfoArgsz = 64 << 10

// Dial connects to the server at path and negotiates the version.
func Dial(path string) (*Client, error) {
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("vfio: dialing %s: %w", path, err)
	}
	c := &Client{conn: conn, t: newTransport(conn), maxXfer: DefaultMaxDataXfer, maxFDs: defaultMaxMsgFDs}
	if err := c.negotiate(); err != nil {
		conn.Close()
		return nil, err
	}
	return c, nil
}

func (c *Client) negotiate() error {
	reply, fds, err := c.Call(CmdVersion, encodeVersion(VersionMsg{Major: VersionMajor, Minor: VersionMinor}, clientCaps), nil)
	closeFiles(fds)
	if err != nil {
		return fmt.Errorf("vfio: version: %w", err)
	}
	v, caps, err := decodeVersion(reply)
	if err != nil {
		return fmt.Errorf("vfio: version reply: %w", err)
	}
	if v.Major != VersionMajor || v.Minor > VersionMinor {
		return fmt.Errorf("%w: server version %d.%d", ErrUnsupported, v.Major, v.Minor)
	}
	if p := caps.MaxDataXferSize; p != nil {
		if *p == 0 || *p > DefaultMaxDataXfer {
			return fmt.Errorf("%w: server max_data_xfer_size %d", ErrInvalid, *p)
		}
		c.maxXfer = *p
	}
	if p := caps.MaxMsgFDs; p != nil {
		c.maxFDs = int(min(*p, maxMsgFDs))
	}
	c.multi = caps.WriteMultiple != nil && *caps.WriteMultiple
	return nil
}

// MaxDataXfer returns the negotiated largest data transfer per message;
// larger reads and writes are split.
func (c *Client) MaxDataXfer() uint32 { return c.maxXfer }

// Close closes the connection.
// A call in flight on another goroutine fails.
func (c *Client) Close() error {
	err := c.conn.Close() // first, to end a call that holds the mutex
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.broken == nil {
		c.broken = ErrClosed
	}
	return err
}

// Call sends command cmd with payload and fds and waits for its reply,
// returning the reply payload and any descriptors that came with it (the
// caller owns them). An error reply comes back as an error wrapping its
// syscall.Errno.
func (c *Client) Call(cmd uint16, payload []byte, fds []*os.File) (reply []byte, replyFDs []*os.File, err error) {
	return c.call(cmd, append(newFrame(len(payload)), payload...), fds)
}

func (c *Client) call(cmd uint16, frame []byte, fds []*os.File) ([]byte, []*os.File, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, err := c.sendLocked(cmd, 0, frame, fds)
	if err != nil {
		return nil, nil, err
	}
	for {
		m, err := c.t.recv(c.maxXfer + HeaderSize + maxMsgSlack)
		var fe *frameError
		if errors.As(err, &fe) {
			return nil, nil, fmt.Errorf("vfio: %s reply: %w", CommandName(cmd), fe)
		}
		if err != nil {
			c.broken = fmt.Errorf("%w: %v", ErrClosed, err)
			return nil, nil, fmt.Errorf("vfio: %s reply: %w", CommandName(cmd), err)
		}
		if m.hdr.Type() != FlagTypeReply || m.hdr.ID != id || m.hdr.Command != cmd {
			m.closeFDs() // a stale reply or a request we do not serve
			continue
		}
		if m.hdr.Flags&FlagError != 0 {
			m.closeFDs()
			errno := unix.Errno(m.hdr.Error)
			if errno == 0 {
				errno = unix.EIO
			}
			return nil, nil, fmt.Errorf("vfio: %s: %w", CommandName(cmd), errno)
		}
		return m.payload, m.takeFDs(), nil
	}
}

// post sends a command with No_reply set.
func (c *Client) post(cmd uint16, frame []byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.sendLocked(cmd, FlagNoReply, frame, nil)
	return err
}

func (c *Client) sendLocked(cmd uint16, flags uint32, frame []byte, fds []*os.File) (uint16, error) {
	if c.broken != nil {
		return 0, c.broken
	}
	id := c.nextID
	c.nextID++
	if err := c.t.send(Header{ID: id, Command: cmd, Flags: FlagTypeCommand | flags}, frame, fds); err != nil {
		c.broken = fmt.Errorf("%w: %v", ErrClosed, err)
		return 0, err
	}
	return id, nil
}

// DeviceInfo asks for the device's info.
func (c *Client) DeviceInfo() (DeviceInfo, error) {
	reply, fds, err := c.call(CmdDeviceGetInfo, DeviceInfoMsg{Argsz: DeviceInfoMsgSize}.Append(newFrame(DeviceInfoMsgSize)), nil)
	closeFiles(fds)
	if err != nil {
		return DeviceInfo{}, err
	}
	m, err := DecodeDeviceInfoMsg(reply)
	if err != nil {
		return DeviceInfo{}, fmt.Errorf("vfio: device info reply: %w", err)
	}
	return DeviceInfo{Flags: m.Flags, NumRegions: m.NumRegions, NumIRQs: m.NumIRQs}, nil
}

// RegionInfo asks for region index, retrying with the argsz the server
// needs for capabilities. File is set when the server passed a descriptor
// (the caller owns it); Sparse comes from the sparse-mmap capability.
func (c *Client) RegionInfo(index uint32) (RegionInfo, error) {
	argsz := uint32(RegionInfoMsgSize)
	for {
		req := RegionInfoMsg{Argsz: argsz, Index: index}
		reply, fds, err := c.call(CmdDeviceGetRegionInfo, req.Append(newFrame(RegionInfoMsgSize)), nil)
		if err != nil {
			return RegionInfo{}, err
		}
		m, err := DecodeRegionInfoMsg(reply)
		if err != nil {
			closeFiles(fds)
			return RegionInfo{}, fmt.Errorf("vfio: region %d info reply: %w", index, err)
		}
		if m.Argsz > argsz {
			closeFiles(fds)
			if argsz != RegionInfoMsgSize || m.Argsz > maxRegionInfoArgsz {
				return RegionInfo{}, fmt.Errorf("%w: region %d info wants argsz %d", ErrInvalid, index, m.Argsz)
			}
			argsz = m.Argsz
			continue
		}
		ri := RegionInfo{Flags: m.Flags, Size: m.Size, Offset: m.Offset}
		if m.Flags&RegionFlagCaps != 0 {
			if ri.Sparse, err = parseRegionCaps(reply, m.CapOffset); err != nil {
				closeFiles(fds)
				return RegionInfo{}, fmt.Errorf("vfio: region %d info reply: %w", index, err)
			}
		}
		if len(fds) > 0 {
			ri.File = fds[0]
			closeFiles(fds[1:])
		}
		return ri, nil
	}
}

// parseRegionCaps walks the capability chain of a region info reply and
// returns the sparse mmap areas. Offsets must move forward, so a looping
// chain is refused.
func parseRegionCaps(reply []byte, off uint32) ([]SparseArea, error) {
	var areas []SparseArea
	for prev := uint32(0); off != 0; {
		if off <= prev || off < RegionInfoMsgSize || uint64(off) > uint64(len(reply)) {
			return nil, fmt.Errorf("%w: capability offset %d", ErrInvalid, off)
		}
		ch, err := DecodeCapHeader(reply[off:])
		if err != nil {
			return nil, err
		}
		if ch.ID == CapIDSparseMmap {
			body := reply[off+CapHeaderSize:]
			sm, err := DecodeSparseMmapCap(body)
			if err != nil {
				return nil, err
			}
			body = body[SparseMmapCapSize:]
			if uint64(sm.NrAreas)*SparseAreaSize > uint64(len(body)) {
				return nil, fmt.Errorf("%w: %d sparse areas in %d bytes", ErrInvalid, sm.NrAreas, len(body))
			}
			for i := range sm.NrAreas {
				a, _ := DecodeSparseArea(body[i*SparseAreaSize:])
				areas = append(areas, a)
			}
		}
		prev, off = off, ch.Next
	}
	return areas, nil
}

// IRQInfo asks for interrupt index.
func (c *Client) IRQInfo(index uint32) (IRQInfo, error) {
	req := IRQInfoMsg{Argsz: IRQInfoMsgSize, Index: index}
	reply, fds, err := c.call(CmdDeviceGetIRQInfo, req.Append(newFrame(IRQInfoMsgSize)), nil)
	closeFiles(fds)
	if err != nil {
		return IRQInfo{}, err
	}
	m, err := DecodeIRQInfoMsg(reply)
	if err != nil {
		return IRQInfo{}, fmt.Errorf("vfio: irq %d info reply: %w", index, err)
	}
	return IRQInfo{Flags: m.Flags, Count: m.Count}, nil
}

// chunks calls fn for successive pieces of p of at most the negotiated
// transfer size.
func (c *Client) chunks(offset uint64, p []byte, fn func(off uint64, q []byte) error) error {
	for len(p) > 0 {
		n := min(len(p), int(c.maxXfer))
		if err := fn(offset, p[:n]); err != nil {
			return err
		}
		offset += uint64(n)
		p = p[n:]
	}
	return nil
}

// ReadRegion reads len(p) bytes of region index at offset.
func (c *Client) ReadRegion(index uint32, offset uint64, p []byte) error {
	return c.chunks(offset, p, func(off uint64, q []byte) error {
		req := RegionAccessMsg{Offset: off, Region: index, Count: uint32(len(q))}
		reply, fds, err := c.call(CmdRegionRead, req.Append(newFrame(RegionAccessSize)), nil)
		closeFiles(fds)
		if err != nil {
			return err
		}
		m, err := DecodeRegionAccessMsg(reply)
		if err != nil {
			return fmt.Errorf("vfio: region read reply: %w", err)
		}
		if m.Count != req.Count || len(reply)-RegionAccessSize != len(q) {
			return fmt.Errorf("%w: region read of %d bytes answered with %d", ErrInvalid, len(q), m.Count)
		}
		copy(q, reply[RegionAccessSize:])
		return nil
	})
}

func regionWriteFrame(index uint32, off uint64, q []byte) []byte {
	req := RegionAccessMsg{Offset: off, Region: index, Count: uint32(len(q))}
	return append(req.Append(newFrame(RegionAccessSize+len(q))), q...)
}

// WriteRegion writes p to region index at offset and waits for each reply.
func (c *Client) WriteRegion(index uint32, offset uint64, p []byte) error {
	return c.chunks(offset, p, func(off uint64, q []byte) error {
		_, fds, err := c.call(CmdRegionWrite, regionWriteFrame(index, off, q), nil)
		closeFiles(fds)
		return err
	})
}

// PostWriteRegion writes p to region index at offset as posted writes (No_reply
// set); failures are only seen in the server's log. The server handles
// requests in order, so a later request observes the write.
func (c *Client) PostWriteRegion(index uint32, offset uint64, p []byte) error {
	return c.chunks(offset, p, func(off uint64, q []byte) error {
		return c.post(CmdRegionWrite, regionWriteFrame(index, off, q))
	})
}

// RegionWrite is one write of a WriteRegionMulti: at most WriteOneMaxData
// bytes.
type RegionWrite struct {
	Region uint32
	Offset uint64
	Data   []byte
}

// WriteRegionMulti sends ws as VFIO_USER_REGION_WRITE_MULTI messages and
// waits for their replies. It needs the server to have accepted
// write_multiple.
func (c *Client) WriteRegionMulti(ws []RegionWrite) error {
	if !c.multi {
		return fmt.Errorf("%w: server did not accept write_multiple", ErrUnsupported)
	}
	perMsg := int(c.maxXfer) / WriteOneSize
	for len(ws) > 0 {
		batch := ws[:min(len(ws), perMsg)]
		ws = ws[len(batch):]
		frame := WriteMultiMsg{WrCnt: uint64(len(batch))}.Append(newFrame(WriteMultiSize + len(batch)*WriteOneSize))
		for _, w := range batch {
			if len(w.Data) == 0 || len(w.Data) > WriteOneMaxData {
				return fmt.Errorf("%w: write multi entry of %d bytes", ErrInvalid, len(w.Data))
			}
			one := WriteOne{Offset: w.Offset, Region: w.Region, Count: uint32(len(w.Data))}
			copy(one.Data[:], w.Data)
			frame = one.Append(frame)
		}
		reply, fds, err := c.call(CmdRegionWriteMulti, frame, nil)
		closeFiles(fds)
		if err != nil {
			return err
		}
		m, err := DecodeWriteMultiMsg(reply)
		if err != nil {
			return fmt.Errorf("vfio: write multi reply: %w", err)
		}
		if m.WrCnt != uint64(len(batch)) {
			return fmt.Errorf("%w: write multi of %d completed %d", ErrInvalid, len(batch), m.WrCnt)
		}
	}
	return nil
}

// MapDMA maps r, passing r.File's descriptor when set.
func (c *Client) MapDMA(r DMARegion) error {
	req := DMAMapMsg{Argsz: DMAMapMsgSize, Flags: r.Prot, Offset: r.Offset, Addr: r.IOVA, Size: r.Size}
	var fds []*os.File
	if r.File != nil {
		fds = []*os.File{r.File}
	}
	_, rfds, err := c.call(CmdDMAMap, req.Append(newFrame(DMAMapMsgSize)), fds)
	closeFiles(rfds)
	return err
}

// UnmapDMA unmaps [iova, iova+size).
func (c *Client) UnmapDMA(iova, size uint64) error {
	req := DMAUnmapMsg{Argsz: DMAUnmapMsgSize, Addr: iova, Size: size}
	_, fds, err := c.call(CmdDMAUnmap, req.Append(newFrame(DMAUnmapMsgSize)), nil)
	closeFiles(fds)
	return err
}

// SetIRQs sends s. Eventfds go as SCM_RIGHTS; like QEMU, a run of nil
// entries (de-assign) goes as its own message without descriptors, and runs
// longer than the server's max_msg_fds are split.
func (c *Client) SetIRQs(s IRQSet) error {
	data := s.Flags & IRQSetDataTypeMask
	if data != IRQSetDataEventfd || len(s.FDs) == 0 {
		req := IRQSetMsg{Argsz: IRQSetMsgSize, Flags: s.Flags, Index: s.Index, Start: s.Start, Count: s.Count}
		if data == IRQSetDataBool {
			req.Argsz += uint32(len(s.Bools))
		}
		frame := req.Append(newFrame(int(req.Argsz)))
		for _, b := range s.Bools {
			frame = append(frame, boolByte(b))
		}
		_, fds, err := c.call(CmdDeviceSetIRQs, frame, nil)
		closeFiles(fds)
		return err
	}
	if len(s.FDs) != int(s.Count) {
		return fmt.Errorf("%w: set irqs count %d with %d eventfds", ErrInvalid, s.Count, len(s.FDs))
	}
	for i := 0; i < len(s.FDs); {
		n := 1
		for i+n < len(s.FDs) && n < c.maxFDs && (s.FDs[i+n] == nil) == (s.FDs[i] == nil) {
			n++
		}
		req := IRQSetMsg{Argsz: IRQSetMsgSize, Flags: s.Flags, Index: s.Index, Start: s.Start + uint32(i), Count: uint32(n)}
		var fds []*os.File
		if s.FDs[i] != nil {
			fds = s.FDs[i : i+n]
		}
		_, rfds, err := c.call(CmdDeviceSetIRQs, req.Append(newFrame(IRQSetMsgSize)), fds)
		closeFiles(rfds)
		if err != nil {
			return err
		}
		i += n
	}
	return nil
}

func boolByte(b bool) byte {
	if b {
		return 1
	}
	return 0
}

// Reset resets the device.
func (c *Client) Reset() error {
	_, fds, err := c.call(CmdDeviceReset, newFrame(0), nil)
	closeFiles(fds)
	return err
}
