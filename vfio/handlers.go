package vfio

import (
	"fmt"
	"os"
)

// handler serves one command: it returns the reply frame (see newFrame; nil
// for an empty payload) and descriptors to pass with it, or an error that
// becomes an error reply. Descriptors it keeps it takes from m
// (m.takeFDs); the rest are closed after it returns.
type handler func(s *session, m *message) (frame []byte, fds []*os.File, err error)

// command is one entry of the dispatch table.
type command struct {
	handle handler // nil: not supported (ENOTSUP)
	maxFDs int     // descriptors the command may carry
}

// commands is the dispatch table. DEVICE_FEATURE and MIG_DATA_* (in
// migration_server.go) answer ENOTSUP for a device that is not a Migrator;
// DMA_READ/DMA_WRITE go server to client only.
var commands = [numCommands]command{
	CmdVersion:             {handle: handleVersion},
	CmdDMAMap:              {handle: handleDMAMap, maxFDs: 1},
	CmdDMAUnmap:            {handle: handleDMAUnmap},
	CmdDeviceGetInfo:       {handle: handleDeviceGetInfo},
	CmdDeviceGetRegionInfo: {handle: handleGetRegionInfo},
	CmdDeviceGetIRQInfo:    {handle: handleGetIRQInfo},
	CmdDeviceSetIRQs:       {handle: handleSetIRQs, maxFDs: maxMsgFDs},
	CmdRegionRead:          {handle: handleRegionRead},
	CmdRegionWrite:         {handle: handleRegionWrite},
	CmdDeviceReset:         {handle: handleReset},
	CmdRegionWriteMulti:    {handle: handleRegionWriteMulti},
	CmdDeviceFeature:       {handle: handleDeviceFeature},
	CmdMigDataRead:         {handle: handleMigDataRead},
	CmdMigDataWrite:        {handle: handleMigDataWrite},
}

func lookupCommand(cmd uint16) command {
	if int(cmd) < len(commands) {
		return commands[cmd]
	}
	return command{}
}

// decodeArgsz decodes a fixed-size request whose first field is argsz and
// checks argsz against the least the command accepts.
func decodeArgsz[T any](m *message, decode func([]byte) (T, error), argsz func(T) uint32, least uint32) (T, error) {
	v, err := decode(m.payload)
	if err != nil {
		return v, err
	}
	if a := argsz(v); a < least {
		return v, fmt.Errorf("%w: %s argsz %d below %d", ErrInvalid, CommandName(m.hdr.Command), a, least)
	}
	return v, nil
}

func handleDMAMap(s *session, m *message) ([]byte, []*os.File, error) {
	req, err := decodeArgsz(m, DecodeDMAMapMsg, func(v DMAMapMsg) uint32 { return v.Argsz }, DMAMapMsgSize)
	if err != nil {
		return nil, nil, err
	}
	r := DMARegion{IOVA: req.Addr, Size: req.Size, Offset: req.Offset, Prot: req.Flags}
	if len(m.fds) == 1 {
		r.File = m.fds[0] // Map does not keep it; closed after the reply
	}
	return nil, nil, s.srv.dma.Map(r)
}

func handleDMAUnmap(s *session, m *message) ([]byte, []*os.File, error) {
	req, err := decodeArgsz(m, DecodeDMAUnmapMsg, func(v DMAUnmapMsg) uint32 { return v.Argsz }, DMAUnmapMsgSize)
	if err != nil {
		return nil, nil, err
	}
	switch {
	case req.Flags&DMAUnmapFlagGetDirtyBitmap != 0:
		return nil, nil, fmt.Errorf("%w: dma unmap dirty bitmap", ErrUnsupported)
	case req.Flags&^DMAUnmapFlagAll != 0:
		return nil, nil, fmt.Errorf("%w: dma unmap flags %#x", ErrInvalid, req.Flags)
	case req.Flags&DMAUnmapFlagAll != 0:
		if req.Addr != 0 || req.Size != 0 {
			return nil, nil, fmt.Errorf("%w: dma unmap all with a range", ErrInvalid)
		}
		s.srv.dma.UnmapAll()
	default:
		if err := s.srv.dma.Unmap(req.Addr, req.Size); err != nil {
			return nil, nil, err
		}
	}
	// "The server responds with the original DMA entry in the request."
	req.Argsz = DMAUnmapMsgSize
	return req.Append(newFrame(DMAUnmapMsgSize)), nil, nil
}

func handleDeviceGetInfo(s *session, m *message) ([]byte, []*os.File, error) {
	if _, err := decodeArgsz(m, DecodeDeviceInfoMsg, func(v DeviceInfoMsg) uint32 { return v.Argsz }, DeviceInfoMsgSize); err != nil {
		return nil, nil, err
	}
	info := s.srv.dev.Info()
	reply := DeviceInfoMsg{Argsz: DeviceInfoMsgSize, Flags: info.Flags, NumRegions: info.NumRegions, NumIRQs: info.NumIRQs}
	return reply.Append(newFrame(DeviceInfoMsgSize)), nil, nil
}

// handleGetRegionInfo answers as QEMU 11.1 needs (docs/testing.md, "QEMU 11.1 and vfio-user"):
// to an argsz too small for the capabilities, the needed argsz with neither
// the CAPS flag nor a capability offset and no descriptor; to a full argsz,
// the sparse-mmap capability when the device lists areas, and the region's
// descriptor whenever it is mmap-able.
func handleGetRegionInfo(s *session, m *message) ([]byte, []*os.File, error) {
	req, err := decodeArgsz(m, DecodeRegionInfoMsg, func(v RegionInfoMsg) uint32 { return v.Argsz }, RegionInfoMsgSize)
	if err != nil {
		return nil, nil, err
	}
	ri, err := s.srv.dev.RegionInfo(req.Index)
	if err != nil {
		return nil, nil, fmt.Errorf("vfio: region %d info: %w", req.Index, err)
	}
	reply := RegionInfoMsg{Index: req.Index, Size: ri.Size, Offset: ri.Offset,
		Flags: ri.Flags &^ (RegionFlagCaps | RegionFlagMmap)}
	var caps []byte
	if ri.File != nil {
		reply.Flags |= RegionFlagMmap
		if len(ri.Sparse) > 0 {
			caps = CapHeader{ID: CapIDSparseMmap, Version: CapVersionSparseMmap}.Append(nil)
			caps = SparseMmapCap{NrAreas: uint32(len(ri.Sparse))}.Append(caps)
			for _, a := range ri.Sparse {
				caps = a.Append(caps)
			}
		}
	}
	full := uint32(RegionInfoMsgSize + len(caps))
	reply.Argsz = full
	if req.Argsz < full {
		return reply.Append(newFrame(RegionInfoMsgSize)), nil, nil
	}
	if len(caps) > 0 {
		reply.Flags |= RegionFlagCaps
		reply.CapOffset = RegionInfoMsgSize
	}
	frame := append(reply.Append(newFrame(int(full))), caps...)
	if ri.File != nil {
		return frame, []*os.File{ri.File}, nil
	}
	return frame, nil, nil
}

func handleGetIRQInfo(s *session, m *message) ([]byte, []*os.File, error) {
	req, err := decodeArgsz(m, DecodeIRQInfoMsg, func(v IRQInfoMsg) uint32 { return v.Argsz }, IRQInfoMsgSize)
	if err != nil {
		return nil, nil, err
	}
	info, err := s.srv.dev.IRQInfo(req.Index)
	if err != nil {
		return nil, nil, fmt.Errorf("vfio: irq %d info: %w", req.Index, err)
	}
	reply := IRQInfoMsg{Argsz: IRQInfoMsgSize, Flags: info.Flags, Index: req.Index, Count: info.Count}
	return reply.Append(newFrame(IRQInfoMsgSize)), nil, nil
}

func handleSetIRQs(s *session, m *message) ([]byte, []*os.File, error) {
	req, err := decodeArgsz(m, DecodeIRQSetMsg, func(v IRQSetMsg) uint32 { return v.Argsz }, IRQSetMsgSize)
	if err != nil {
		return nil, nil, err
	}
	if int(req.Argsz) > len(m.payload) {
		return nil, nil, fmt.Errorf("%w: set irqs argsz %d beyond payload %d", ErrInvalid, req.Argsz, len(m.payload))
	}
	set := IRQSet{Index: req.Index, Flags: req.Flags, Start: req.Start, Count: req.Count}
	if req.Flags&IRQSetDataBool != 0 {
		data := m.payload[IRQSetMsgSize:req.Argsz]
		if uint64(len(data)) < uint64(req.Count) {
			return nil, nil, fmt.Errorf("%w: set irqs %d bools for count %d", ErrInvalid, len(data), req.Count)
		}
		set.Bools = make([]bool, req.Count)
		for i := range set.Bools {
			set.Bools[i] = data[i] != 0
		}
	}
	set.FDs = m.takeFDs() // Set owns them now, on success or failure
	return nil, nil, s.srv.irqs.Set(set)
}

func handleRegionRead(s *session, m *message) ([]byte, []*os.File, error) {
	req, err := DecodeRegionAccessMsg(m.payload)
	if err != nil {
		return nil, nil, err
	}
	if err := s.checkAccess(req); err != nil {
		return nil, nil, err
	}
	frame := req.Append(newFrame(RegionAccessSize + int(req.Count)))
	frame = frame[:len(frame)+int(req.Count)]
	if err := s.srv.dev.ReadRegion(req.Region, req.Offset, frame[HeaderSize+RegionAccessSize:]); err != nil {
		return nil, nil, fmt.Errorf("vfio: region %d read at %#x+%d: %w", req.Region, req.Offset, req.Count, err)
	}
	return frame, nil, nil
}

func handleRegionWrite(s *session, m *message) ([]byte, []*os.File, error) {
	req, err := DecodeRegionAccessMsg(m.payload)
	if err != nil {
		return nil, nil, err
	}
	if err := s.checkAccess(req); err != nil {
		return nil, nil, err
	}
	data := m.payload[RegionAccessSize:]
	if uint64(len(data)) != uint64(req.Count) {
		return nil, nil, fmt.Errorf("%w: region write count %d with %d data bytes", ErrInvalid, req.Count, len(data))
	}
	if err := s.srv.dev.WriteRegion(req.Region, req.Offset, data); err != nil {
		return nil, nil, fmt.Errorf("vfio: region %d write at %#x+%d: %w", req.Region, req.Offset, req.Count, err)
	}
	return req.Append(newFrame(RegionAccessSize)), nil, nil
}

// checkAccess bounds a region access by the negotiated transfer size and
// the offset range.
func (s *session) checkAccess(req RegionAccessMsg) error {
	if req.Count > s.maxXfer {
		return fmt.Errorf("%w: region access of %d bytes, max_data_xfer_size %d", ErrTooBig, req.Count, s.maxXfer)
	}
	if req.Offset+uint64(req.Count) < req.Offset {
		return fmt.Errorf("%w: region access at %#x+%d wraps", ErrInvalid, req.Offset, req.Count)
	}
	return nil
}

// handleRegionWriteMulti checks every entry before doing any write, then
// does them in order; the first failing write ends the request with an error
// reply (the writes before it stay done).
func handleRegionWriteMulti(s *session, m *message) ([]byte, []*os.File, error) {
	req, err := DecodeWriteMultiMsg(m.payload)
	if err != nil {
		return nil, nil, err
	}
	body := m.payload[WriteMultiSize:]
	if req.WrCnt != uint64(len(body))/WriteOneSize || len(body)%WriteOneSize != 0 {
		return nil, nil, fmt.Errorf("%w: write multi wr_cnt %d with %d entry bytes", ErrInvalid, req.WrCnt, len(body))
	}
	wrs := make([]WriteOne, req.WrCnt)
	for i := range wrs {
		if wrs[i], err = DecodeWriteOne(body[i*WriteOneSize:]); err != nil {
			return nil, nil, err
		}
		if wrs[i].Count == 0 || wrs[i].Count > WriteOneMaxData {
			return nil, nil, fmt.Errorf("%w: write multi entry %d count %d", ErrInvalid, i, wrs[i].Count)
		}
	}
	for i, w := range wrs {
		if err := s.srv.dev.WriteRegion(w.Region, w.Offset, w.Data[:w.Count]); err != nil {
			return nil, nil, fmt.Errorf("vfio: write multi entry %d: region %d write at %#x+%d: %w", i, w.Region, w.Offset, w.Count, err)
		}
	}
	return WriteMultiMsg{WrCnt: req.WrCnt}.Append(newFrame(WriteMultiSize)), nil, nil
}

// handleReset resets the device; a migrating device is then RUNNING, the
// way out of ERROR (vfio.h: "To recover from ERROR VFIO_DEVICE_RESET must be
// used to return the device_state back to RUNNING"). A failed reset leaves
// the migration state as it was.
func handleReset(s *session, m *message) ([]byte, []*os.File, error) {
	if err := s.srv.dev.Reset(); err != nil {
		return nil, nil, fmt.Errorf("vfio: device reset: %w", err)
	}
	if s.srv.mig != nil {
		s.srv.mig.set(MigStateRunning)
	}
	return nil, nil, nil
}
