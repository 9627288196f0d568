package vfio

import (
	"net"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// rawConn talks to a server with hand-made bytes.
type rawConn struct {
	t  *testing.T
	c  *net.UnixConn
	tr *transport
}

func dialRaw(t *testing.T, path string) *rawConn {
	t.Helper()
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, c: c, tr: newTransport(c)}
}

// send writes h (Size as given, not computed) and payload.
func (r *rawConn) send(h Header, payload []byte, fds ...*os.File) {
	r.t.Helper()
	b := append(h.Append(nil), payload...)
	var oob []byte
	if len(fds) > 0 {
		var ints []int
		for _, f := range fds {
			fd, err := rawFD(f)
			if err != nil {
				r.t.Fatal(err)
			}
			ints = append(ints, fd)
		}
		oob = unix.UnixRights(ints...)
	}
	n, _, err := r.c.WriteMsgUnix(b, oob, nil)
	if err == nil && n < len(b) {
		_, err = r.c.Write(b[n:])
	}
	if err != nil {
		r.t.Fatalf("raw send: %v", err)
	}
}

// command sends a well-framed command.
func (r *rawConn) command(id, cmd uint16, flags uint32, payload []byte, fds ...*os.File) {
	r.send(Header{ID: id, Command: cmd, Size: uint32(HeaderSize + len(payload)), Flags: FlagTypeCommand | flags}, payload, fds...)
}

func (r *rawConn) reply() *message {
	r.t.Helper()
	m, err := r.tr.recv(1 << 21)
	if err != nil {
		r.t.Fatalf("reading reply: %v", err)
	}
	if len(m.fds) != 0 {
		m.closeFDs()
		r.t.Fatalf("reply to %d carries descriptors", m.hdr.ID)
	}
	if m.hdr.Type() != FlagTypeReply {
		r.t.Fatalf("reply %+v is not a reply", m.hdr)
	}
	return m
}

func (r *rawConn) expectError(what string, id uint16, errno unix.Errno) {
	r.t.Helper()
	m := r.reply()
	if m.hdr.ID != id || m.hdr.Flags&FlagError == 0 || unix.Errno(m.hdr.Error) != errno || m.hdr.Size != HeaderSize {
		r.t.Errorf("%s: reply %+v, want error %v (%s) for id %d", what, m.hdr, errno, unix.ErrnoName(errno), id)
	}
}

func (r *rawConn) expectOK(what string, id uint16) *message {
	r.t.Helper()
	m := r.reply()
	if m.hdr.ID != id || m.hdr.Flags&FlagError != 0 {
		r.t.Fatalf("%s: reply %+v, want success for id %d", what, m.hdr, id)
	}
	return m
}

// TestServerSurvivesMalformed sends malformed, oversized, truncated and
// unknown messages on one connection; each gets an error reply with the
// right errno, and valid requests keep working, on this connection and the
// next.
func TestServerSurvivesMalformed(t *testing.T) {
	const maxXfer = 64 << 10
	ts := startServer(t, maxXfer)
	r := dialRaw(t, ts.path)
	getInfo := DeviceInfoMsg{Argsz: DeviceInfoMsgSize}.Append(nil)

	r.command(1, CmdDeviceGetInfo, 0, getInfo)
	r.expectError("request before VERSION", 1, unix.EINVAL)
	fdsBefore := openFDs(t) // now that the server holds its end of the connection
	r.command(2, CmdVersion, 0, append(VersionMsg{Major: 0}.Append(nil), "{not json\x00"...))
	r.expectError("garbage version JSON", 2, unix.EINVAL)
	r.command(3, CmdVersion, 0, append(VersionMsg{Major: 1}.Append(nil), "{}\x00"...))
	r.expectError("major version 1", 3, unix.ENOTSUP)
	r.command(4, CmdVersion, 0, encodeVersion(VersionMsg{}, clientCaps))
	m := r.expectOK("VERSION", 4)
	if _, caps, err := decodeVersion(m.payload); err != nil || *caps.MaxDataXferSize != maxXfer {
		t.Fatalf("version reply %+v, %v", caps, err)
	}
	r.command(5, CmdVersion, 0, encodeVersion(VersionMsg{}, clientCaps))
	r.expectError("second VERSION", 5, unix.EINVAL)

	// Framing.
	r.send(Header{ID: 6, Command: CmdDeviceGetInfo, Size: 8}, nil)
	r.expectError("size below header", 6, unix.EINVAL)
	big := make([]byte, maxXfer+maxMsgSlack+1)
	r.command(7, CmdRegionWrite, 0, big, eventfd(t))
	r.expectError("oversized", 7, unix.E2BIG)
	r.command(8, CmdRegionRead, 0, make([]byte, 8))
	r.expectError("truncated REGION_READ", 8, unix.EINVAL)
	r.command(9, CmdDMAMap, 0, nil)
	r.expectError("empty DMA_MAP", 9, unix.EINVAL)

	// Unknown and unsupported commands.
	for i, cmd := range []uint16{0, 14, CmdDeviceGetRegionIOFDs, CmdDMARead, CmdDeviceFeature, CmdMigDataRead, CmdMigDataWrite, 99, 0xffff} {
		id := uint16(20 + i)
		r.command(id, cmd, 0, make([]byte, 8))
		r.expectError(CommandName(cmd), id, unix.ENOTSUP)
	}

	// Wrong direction and type.
	r.send(Header{ID: 40, Command: CmdDeviceGetInfo, Size: HeaderSize + DeviceInfoMsgSize, Flags: FlagTypeReply}, getInfo)
	r.expectError("reply where a command is expected", 40, unix.EINVAL)
	r.send(Header{ID: 41, Command: CmdDeviceGetInfo, Size: HeaderSize + DeviceInfoMsgSize, Flags: 5}, getInfo)
	r.expectError("unknown message type", 41, unix.EINVAL)

	// Descriptors where none are expected (they must be closed, see below).
	r.command(42, CmdDeviceGetInfo, 0, getInfo, eventfd(t), eventfd(t))
	r.expectError("fds with GET_INFO", 42, unix.EINVAL)
	r.command(43, CmdDMAMap, 0, DMAMapMsg{Argsz: DMAMapMsgSize, Flags: DMAProtRead, Size: pg}.Append(nil), eventfd(t), eventfd(t))
	r.expectError("two fds with DMA_MAP", 43, unix.EINVAL)
	r.command(44, CmdDeviceSetIRQs, 0, IRQSetMsg{Argsz: IRQSetMsgSize, Flags: IRQSetDataNone | IRQSetActionTrigger, Count: 1}.Append(nil), eventfd(t))
	r.expectError("fds with SET_IRQS DATA_NONE", 44, unix.EINVAL)

	// Bad argsz and arguments.
	r.command(50, CmdDeviceGetRegionInfo, 0, RegionInfoMsg{Argsz: 8, Index: 0}.Append(nil))
	r.expectError("region info argsz 8", 50, unix.EINVAL)
	r.command(51, CmdDeviceGetInfo, 0, DeviceInfoMsg{Argsz: 4}.Append(nil))
	r.expectError("device info argsz 4", 51, unix.EINVAL)
	r.command(52, CmdDMAMap, 0, DMAMapMsg{Argsz: 0, Size: pg}.Append(nil))
	r.expectError("DMA_MAP argsz 0", 52, unix.EINVAL)
	r.command(53, CmdDeviceSetIRQs, 0, IRQSetMsg{Argsz: 200, Flags: IRQSetDataNone | IRQSetActionTrigger, Count: 1}.Append(nil))
	r.expectError("SET_IRQS argsz beyond payload", 53, unix.EINVAL)
	r.command(54, CmdDeviceSetIRQs, 0, IRQSetMsg{Argsz: IRQSetMsgSize, Flags: IRQSetDataBool | IRQSetActionTrigger, Count: 1}.Append(nil))
	r.expectError("SET_IRQS bools missing", 54, unix.EINVAL)
	r.command(55, CmdRegionRead, 0, RegionAccessMsg{Region: fakeRegsIndex, Count: maxXfer + 1}.Append(nil))
	r.expectError("read above max_data_xfer_size", 55, unix.E2BIG)
	r.command(56, CmdRegionWrite, 0, append(RegionAccessMsg{Region: fakeRegsIndex, Count: 8}.Append(nil), 1, 2, 3, 4))
	r.expectError("write count above data", 56, unix.EINVAL)
	r.command(57, CmdRegionRead, 0, RegionAccessMsg{Region: 77, Count: 4}.Append(nil))
	r.expectError("read of unknown region", 57, unix.EINVAL)
	r.command(58, CmdRegionRead, 0, RegionAccessMsg{Offset: ^uint64(0) - 1, Region: fakeRegsIndex, Count: 4}.Append(nil))
	r.expectError("read offset wraps", 58, unix.EINVAL)
	r.command(59, CmdDMAUnmap, 0, DMAUnmapMsg{Argsz: DMAUnmapMsgSize, Addr: 0x1000, Size: pg}.Append(nil))
	r.expectError("unmap of nothing", 59, unix.ENOENT)
	r.command(60, CmdDMAMap, 0, DMAMapMsg{Argsz: DMAMapMsgSize, Flags: 0x80, Size: pg}.Append(nil))
	r.expectError("DMA_MAP unknown prot", 60, unix.EINVAL)
	r.command(61, CmdDMAUnmap, 0, DMAUnmapMsg{Argsz: DMAUnmapMsgSize, Flags: DMAUnmapFlagGetDirtyBitmap, Size: pg}.Append(nil))
	r.expectError("unmap dirty bitmap", 61, unix.ENOTSUP)
	multi := append(WriteMultiMsg{WrCnt: 2}.Append(nil), WriteOne{Region: fakeRegsIndex, Count: 4}.Append(nil)...)
	r.command(62, CmdRegionWriteMulti, 0, multi)
	r.expectError("write multi wr_cnt above entries", 62, unix.EINVAL)
	r.command(63, CmdRegionWriteMulti, 0, append(WriteMultiMsg{WrCnt: 1}.Append(nil), WriteOne{Count: 9}.Append(nil)...))
	r.expectError("write multi entry of 9 bytes", 63, unix.EINVAL)

	// Posted (No_reply) messages get no reply, even when they fail.
	r.command(70, CmdRegionWrite, FlagNoReply, append(RegionAccessMsg{Region: 77, Count: 4}.Append(nil), 1, 2, 3, 4))
	r.command(71, CmdRegionWrite, FlagNoReply, append(RegionAccessMsg{Offset: 0x80, Region: fakeRegsIndex, Count: 4}.Append(nil), 1, 2, 3, 4))
	r.command(72, CmdRegionRead, 0, RegionAccessMsg{Offset: 0x80, Region: fakeRegsIndex, Count: 4}.Append(nil))
	m = r.expectOK("read after posted writes", 72)
	if got := ne.Uint32(m.payload[RegionAccessSize:]); got != 0x04030201 {
		t.Errorf("posted write not applied: %#x", got)
	}

	// Every descriptor sent along with the bad messages was closed.
	if got := openFDs(t); got != fdsBefore+6 { // the test's own eventfds
		t.Errorf("%d descriptors open, want %d (leak on the server side) ", got, fdsBefore+6)
	}

	r.command(80, CmdDeviceGetInfo, 0, getInfo)
	m = r.expectOK("valid GET_INFO at the end", 80)
	if info, err := DecodeDeviceInfoMsg(m.payload); err != nil || info.NumRegions != PCINumRegions {
		t.Errorf("device info %+v, %v", info, err)
	}

	// A payload cut short by a disconnect ends only that connection.
	r.send(Header{ID: 90, Command: CmdRegionWrite, Size: 1000, Flags: FlagTypeCommand}, make([]byte, 10))
	r.c.Close()
	c := dial(t, ts.path)
	if _, err := c.DeviceInfo(); err != nil {
		t.Fatalf("next client: %v", err)
	}
}

// TestVersionReplyForQEMU sends QEMU 11.1's exact proposal and checks the
// reply against what its client accepts (hw/vfio-user/proxy.c): version 0.0,
// NUL-terminated JSON, no larger than the request (QEMU receives the reply
// into the request's buffer), only proposed capabilities, limits in range.
func TestVersionReplyForQEMU(t *testing.T) {
	ts := startServer(t, 0)
	r := dialRaw(t, ts.path)
	qemu := `{"capabilities":{"migration":{"pgsize":4096,"max_bitmap_size":268435456},"max_msg_fds":16,` +
		`"max_data_xfer_size":1048576,"pgsizes":4096,"max_dma_maps":65535,"write_multiple":true}}`
	req := append(append(VersionMsg{}.Append(nil), qemu...), 0)
	r.command(0, CmdVersion, 0, req)
	m := r.expectOK("VERSION", 0)
	if m.hdr.Size > uint32(HeaderSize+len(req)) {
		t.Fatalf("reply of %d bytes exceeds the %d-byte request", m.hdr.Size, HeaderSize+len(req))
	}
	v, caps, err := decodeVersion(m.payload)
	if err != nil || v != (VersionMsg{}) {
		t.Fatalf("reply version %+v, %v", v, err)
	}
	if m.payload[len(m.payload)-1] != 0 {
		t.Fatal("reply not NUL-terminated")
	}
	if *caps.MaxMsgFDs > 16 || *caps.MaxDataXferSize != DefaultMaxDataXfer || *caps.PgSizes != 4096 ||
		*caps.MaxDMAMaps > 65535 || !*caps.WriteMultiple {
		t.Fatalf("reply capabilities %s", m.payload[VersionMsgSize:])
	}
	// A client proposing nothing gets nothing but the empty object.
	r2 := dialRaw(t, ts.path)
	r.c.Close() // the server takes r2 once r is gone
	r2.command(1, CmdVersion, 0, VersionMsg{}.Append(nil))
	m = r2.expectOK("bare VERSION", 1)
	if got := string(m.payload[VersionMsgSize:]); got != "{\"capabilities\":{}}\x00" {
		t.Fatalf("bare reply %q", got)
	}
}
