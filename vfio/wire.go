package vfio

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The wire format of vfio-user (QEMU docs/interop/vfio-user.rst, "Protocol
// Specification"). All integers are in host byte order ("In this revision,
// all data is in the endianness of the host system"). Each payload struct
// below mirrors one table of the specification; padding is explicit and every
// struct has a fixed wire size, checked by wire_test.go. Variable parts (JSON,
// data, arrays) follow the fixed part and are handled by the message code.

var ne = binary.NativeEndian

// ErrShort is returned (wrapped) by every decoder given fewer bytes than the
// fixed part of its struct.
var ErrShort = errors.New("vfio: short message")

func errShort(what string, need, have int) error {
	return fmt.Errorf("%w: %s needs %d bytes, have %d", ErrShort, what, need, have)
}

// Commands: vfio-user.rst, "Commands".
const (
	CmdVersion              uint16 = 1
	CmdDMAMap               uint16 = 2
	CmdDMAUnmap             uint16 = 3
	CmdDeviceGetInfo        uint16 = 4
	CmdDeviceGetRegionInfo  uint16 = 5
	CmdDeviceGetRegionIOFDs uint16 = 6
	CmdDeviceGetIRQInfo     uint16 = 7
	CmdDeviceSetIRQs        uint16 = 8
	CmdRegionRead           uint16 = 9
	CmdRegionWrite          uint16 = 10
	CmdDMARead              uint16 = 11
	CmdDMAWrite             uint16 = 12
	CmdDeviceReset          uint16 = 13
	CmdRegionWriteMulti     uint16 = 15
	CmdDeviceFeature        uint16 = 16
	CmdMigDataRead          uint16 = 17
	CmdMigDataWrite         uint16 = 18
	numCommands                    = 19
)

var commandNames = [numCommands]string{
	CmdVersion:              "VERSION",
	CmdDMAMap:               "DMA_MAP",
	CmdDMAUnmap:             "DMA_UNMAP",
	CmdDeviceGetInfo:        "DEVICE_GET_INFO",
	CmdDeviceGetRegionInfo:  "DEVICE_GET_REGION_INFO",
	CmdDeviceGetRegionIOFDs: "DEVICE_GET_REGION_IO_FDS",
	CmdDeviceGetIRQInfo:     "DEVICE_GET_IRQ_INFO",
	CmdDeviceSetIRQs:        "DEVICE_SET_IRQS",
	CmdRegionRead:           "REGION_READ",
	CmdRegionWrite:          "REGION_WRITE",
	CmdDMARead:              "DMA_READ",
	CmdDMAWrite:             "DMA_WRITE",
	CmdDeviceReset:          "DEVICE_RESET",
	CmdRegionWriteMulti:     "REGION_WRITE_MULTI",
	CmdDeviceFeature:        "DEVICE_FEATURE",
	CmdMigDataRead:          "MIG_DATA_READ",
	CmdMigDataWrite:         "MIG_DATA_WRITE",
}

// CommandName returns the specification's name of cmd without the
// VFIO_USER_ prefix, or "UNKNOWN(n)".
func CommandName(cmd uint16) string {
	if int(cmd) < len(commandNames) && commandNames[cmd] != "" {
		return commandNames[cmd]
	}
	return fmt.Sprintf("UNKNOWN(%d)", cmd)
}

// Header flags: vfio-user.rst, "Header".
const (
	FlagTypeMask    uint32 = 0xf  // bits 0-3: message type
	FlagTypeCommand uint32 = 0x0  // type Command
	FlagTypeReply   uint32 = 0x1  // type Reply
	FlagNoReply     uint32 = 0x10 // bit 4: No_reply
	FlagError       uint32 = 0x20 // bit 5: Error
)

// Protocol version: vfio-user.rst, "VFIO_USER_VERSION"; QEMU 11.1 proposes
// 0.0 (hw/vfio-user/proxy.h VFIO_USER_MAJOR_VER, VFIO_USER_MINOR_VER).
const (
	VersionMajor uint16 = 0
	VersionMinor uint16 = 0
)

// DMA map flags: vfio-user.rst, "VFIO_USER_DMA_MAP" (bits readable, writeable;
// linux/vfio.h VFIO_DMA_MAP_FLAG_READ/WRITE).
const (
	DMAProtRead  uint32 = 1 << 0
	DMAProtWrite uint32 = 1 << 1
)

// DMA unmap flags: linux/vfio.h VFIO_DMA_UNMAP_FLAG_*; QEMU's client sends
// UNMAP_FLAG_ALL (hw/vfio-user/container.c) although the specification calls
// the field unused.
const (
	DMAUnmapFlagGetDirtyBitmap uint32 = 1 << 0
	DMAUnmapFlagAll            uint32 = 1 << 1
)

// SET_IRQS flags: vfio-user.rst, "VFIO_USER_DEVICE_SET_IRQS"; linux/vfio.h
// VFIO_IRQ_SET_*.
const (
	IRQSetDataNone      uint32 = 1 << 0
	IRQSetDataBool      uint32 = 1 << 1
	IRQSetDataEventfd   uint32 = 1 << 2
	IRQSetActionMask    uint32 = 1 << 3
	IRQSetActionUnmask  uint32 = 1 << 4
	IRQSetActionTrigger uint32 = 1 << 5

	IRQSetDataTypeMask   = IRQSetDataNone | IRQSetDataBool | IRQSetDataEventfd
	IRQSetActionTypeMask = IRQSetActionMask | IRQSetActionUnmask | IRQSetActionTrigger
)

// Region capabilities: linux/vfio.h VFIO_REGION_INFO_CAP_SPARSE_MMAP; version
// 1 per vfio-user.rst, "VFIO sparse mmap cap header".
const (
	CapIDSparseMmap      uint16 = 1
	CapVersionSparseMmap uint16 = 1
)

// Fixed wire sizes of the structs below.
const (
	HeaderSize        = 16
	VersionMsgSize    = 4
	DMAMapMsgSize     = 32
	DMAUnmapMsgSize   = 24
	DeviceInfoMsgSize = 16
	RegionInfoMsgSize = 32
	CapHeaderSize     = 8
	SparseMmapCapSize = 8
	SparseAreaSize    = 16
	RegionIOFDsSize   = 16
	IRQInfoMsgSize    = 16
	IRQSetMsgSize     = 20
	RegionAccessSize  = 16
	DMAAccessSize     = 16
	WriteMultiSize    = 8
	WriteOneSize      = 24
	DeviceFeatureSize = 8
	MigDataSize       = 8

	// WriteOneMaxData is the largest write one WriteOne entry can carry
	// ("This format can only describe writes of 8 bytes or less").
	WriteOneMaxData = 8
)

// Header is the 16-byte header before every message: vfio-user.rst, "Header".
type Header struct {
	ID      uint16
	Command uint16
	Size    uint32 // whole message including this header
	Flags   uint32 // Flag* bits
	Error   uint32 // errno, valid in a reply with FlagError
}

// Type returns the message type bits (FlagTypeCommand or FlagTypeReply).
func (h Header) Type() uint32 { return h.Flags & FlagTypeMask }

// Append appends h's wire form to b.
func (h Header) Append(b []byte) []byte {
	b = ne.AppendUint16(b, h.ID)
	b = ne.AppendUint16(b, h.Command)
	b = ne.AppendUint32(b, h.Size)
	b = ne.AppendUint32(b, h.Flags)
	return ne.AppendUint32(b, h.Error)
}

// DecodeHeader decodes a header from the first HeaderSize bytes of b. It does
// not judge the fields; the server does.
func DecodeHeader(b []byte) (Header, error) {
	if len(b) < HeaderSize {
		return Header{}, errShort("header", HeaderSize, len(b))
	}
	return Header{
		ID:      ne.Uint16(b[0:]),
		Command: ne.Uint16(b[2:]),
		Size:    ne.Uint32(b[4:]),
		Flags:   ne.Uint32(b[8:]),
		Error:   ne.Uint32(b[12:]),
	}, nil
}

// VersionMsg is the fixed part of VFIO_USER_VERSION, request and reply
// (vfio-user.rst, "VFIO_USER_VERSION"); the NUL-terminated JSON "version
// data" follows it.
type VersionMsg struct {
	Major uint16
	Minor uint16
}

func (m VersionMsg) Append(b []byte) []byte {
	b = ne.AppendUint16(b, m.Major)
	return ne.AppendUint16(b, m.Minor)
}

func DecodeVersionMsg(b []byte) (VersionMsg, error) {
	if len(b) < VersionMsgSize {
		return VersionMsg{}, errShort("version", VersionMsgSize, len(b))
	}
	return VersionMsg{Major: ne.Uint16(b[0:]), Minor: ne.Uint16(b[2:])}, nil
}

// DMAMapMsg mirrors the VFIO_USER_DMA_MAP request (vfio-user.rst,
// "VFIO_USER_DMA_MAP"; linux/vfio.h struct vfio_iommu_type1_dma_map with
// vaddr replaced by the file offset).
type DMAMapMsg struct {
	Argsz  uint32
	Flags  uint32 // DMAProt* bits
	Offset uint64 // offset into the passed fd
	Addr   uint64 // IOVA
	Size   uint64
}

func (m DMAMapMsg) Append(b []byte) []byte {
	b = ne.AppendUint32(b, m.Argsz)
	b = ne.AppendUint32(b, m.Flags)
	b = ne.AppendUint64(b, m.Offset)
	b = ne.AppendUint64(b, m.Addr)
	return ne.AppendUint64(b, m.Size)
}

func DecodeDMAMapMsg(b []byte) (DMAMapMsg, error) {
	if len(b) < DMAMapMsgSize {
		return DMAMapMsg{}, errShort("dma map", DMAMapMsgSize, len(b))
	}
	return DMAMapMsg{
		Argsz:  ne.Uint32(b[0:]),
		Flags:  ne.Uint32(b[4:]),
		Offset: ne.Uint64(b[8:]),
		Addr:   ne.Uint64(b[16:]),
		Size:   ne.Uint64(b[24:]),
	}, nil
}

// DMAUnmapMsg mirrors the VFIO_USER_DMA_UNMAP request and reply
// (vfio-user.rst, "VFIO_USER_DMA_UNMAP"; struct vfio_iommu_type1_dma_unmap).
type DMAUnmapMsg struct {
	Argsz uint32
	Flags uint32 // DMAUnmapFlag* bits
	Addr  uint64
	Size  uint64
}

func (m DMAUnmapMsg) Append(b []byte) []byte {
	b = ne.AppendUint32(b, m.Argsz)
	b = ne.AppendUint32(b, m.Flags)
	b = ne.AppendUint64(b, m.Addr)
	return ne.AppendUint64(b, m.Size)
}

func DecodeDMAUnmapMsg(b []byte) (DMAUnmapMsg, error) {
	if len(b) < DMAUnmapMsgSize {
		return DMAUnmapMsg{}, errShort("dma unmap", DMAUnmapMsgSize, len(b))
	}
	return DMAUnmapMsg{
		Argsz: ne.Uint32(b[0:]),
		Flags: ne.Uint32(b[4:]),
		Addr:  ne.Uint64(b[8:]),
		Size:  ne.Uint64(b[16:]),
	}, nil
}

// DeviceInfoMsg mirrors VFIO_USER_DEVICE_GET_INFO, request and reply
// (vfio-user.rst, "VFIO_USER_DEVICE_GET_INFO"; struct vfio_device_info).
type DeviceInfoMsg struct {
	Argsz      uint32
	Flags      uint32
	NumRegions uint32
	NumIRQs    uint32
}

func (m DeviceInfoMsg) Append(b []byte) []byte {
	b = ne.AppendUint32(b, m.Argsz)
	b = ne.AppendUint32(b, m.Flags)
	b = ne.AppendUint32(b, m.NumRegions)
	return ne.AppendUint32(b, m.NumIRQs)
}

func DecodeDeviceInfoMsg(b []byte) (DeviceInfoMsg, error) {
	if len(b) < DeviceInfoMsgSize {
		return DeviceInfoMsg{}, errShort("device info", DeviceInfoMsgSize, len(b))
	}
	return DeviceInfoMsg{
		Argsz:      ne.Uint32(b[0:]),
		Flags:      ne.Uint32(b[4:]),
		NumRegions: ne.Uint32(b[8:]),
		NumIRQs:    ne.Uint32(b[12:]),
	}, nil
}

// RegionInfoMsg mirrors VFIO_USER_DEVICE_GET_REGION_INFO, request and reply
// (vfio-user.rst, "VFIO_USER_DEVICE_GET_REGION_INFO"; struct
// vfio_region_info). In a reply, capabilities follow at CapOffset.
type RegionInfoMsg struct {
	Argsz     uint32
	Flags     uint32 // RegionFlag* bits
	Index     uint32
	CapOffset uint32 // from the start of this struct; 0 = none
	Size      uint64
	Offset    uint64 // mmap offset into the passed fd
}

func (m RegionInfoMsg) Append(b []byte) []byte {
	b = ne.AppendUint32(b, m.Argsz)
	b = ne.AppendUint32(b, m.Flags)
	b = ne.AppendUint32(b, m.Index)
	b = ne.AppendUint32(b, m.CapOffset)
	b = ne.AppendUint64(b, m.Size)
	return ne.AppendUint64(b, m.Offset)
}

func DecodeRegionInfoMsg(b []byte) (RegionInfoMsg, error) {
	if len(b) < RegionInfoMsgSize {
		return RegionInfoMsg{}, errShort("region info", RegionInfoMsgSize, len(b))
	}
	return RegionInfoMsg{
		Argsz:     ne.Uint32(b[0:]),
		Flags:     ne.Uint32(b[4:]),
		Index:     ne.Uint32(b[8:]),
		CapOffset: ne.Uint32(b[12:]),
		Size:      ne.Uint64(b[16:]),
		Offset:    ne.Uint64(b[24:]),
	}, nil
}

// CapHeader mirrors struct vfio_info_cap_header (vfio-user.rst, "VFIO cap
// header format"). Next is relative to the start of the region info struct.
type CapHeader struct {
	ID      uint16
	Version uint16
	Next    uint32
}

func (m CapHeader) Append(b []byte) []byte {
	b = ne.AppendUint16(b, m.ID)
	b = ne.AppendUint16(b, m.Version)
	return ne.AppendUint32(b, m.Next)
}

func DecodeCapHeader(b []byte) (CapHeader, error) {
	if len(b) < CapHeaderSize {
		return CapHeader{}, errShort("cap header", CapHeaderSize, len(b))
	}
	return CapHeader{ID: ne.Uint16(b[0:]), Version: ne.Uint16(b[2:]), Next: ne.Uint32(b[4:])}, nil
}

// SparseMmapCap mirrors the body of struct vfio_region_info_cap_sparse_mmap
// after its cap header (vfio-user.rst, "VFIO region info cap sparse mmap");
// NrAreas SparseArea entries follow.
type SparseMmapCap struct {
	NrAreas  uint32
	Reserved uint32
}

func (m SparseMmapCap) Append(b []byte) []byte {
	b = ne.AppendUint32(b, m.NrAreas)
	return ne.AppendUint32(b, m.Reserved)
}

func DecodeSparseMmapCap(b []byte) (SparseMmapCap, error) {
	if len(b) < SparseMmapCapSize {
		return SparseMmapCap{}, errShort("sparse mmap cap", SparseMmapCapSize, len(b))
	}
	return SparseMmapCap{NrAreas: ne.Uint32(b[0:]), Reserved: ne.Uint32(b[4:])}, nil
}

// Append appends a's wire form (struct vfio_region_sparse_mmap_area) to b.
func (a SparseArea) Append(b []byte) []byte {
	b = ne.AppendUint64(b, a.Offset)
	return ne.AppendUint64(b, a.Size)
}

func DecodeSparseArea(b []byte) (SparseArea, error) {
	if len(b) < SparseAreaSize {
		return SparseArea{}, errShort("sparse area", SparseAreaSize, len(b))
	}
	return SparseArea{Offset: ne.Uint64(b[0:]), Size: ne.Uint64(b[8:])}, nil
}

// RegionIOFDsMsg mirrors the fixed part of VFIO_USER_DEVICE_GET_REGION_IO_FDS
// (vfio-user.rst, "VFIO_USER_DEVICE_GET_REGION_IO_FDS").
type RegionIOFDsMsg struct {
	Argsz uint32
	Flags uint32
	Index uint32
	Count uint32
}

func (m RegionIOFDsMsg) Append(b []byte) []byte {
	b = ne.AppendUint32(b, m.Argsz)
	b = ne.AppendUint32(b, m.Flags)
	b = ne.AppendUint32(b, m.Index)
	return ne.AppendUint32(b, m.Count)
}

func DecodeRegionIOFDsMsg(b []byte) (RegionIOFDsMsg, error) {
	if len(b) < RegionIOFDsSize {
		return RegionIOFDsMsg{}, errShort("region io fds", RegionIOFDsSize, len(b))
	}
	return RegionIOFDsMsg{
		Argsz: ne.Uint32(b[0:]),
		Flags: ne.Uint32(b[4:]),
		Index: ne.Uint32(b[8:]),
		Count: ne.Uint32(b[12:]),
	}, nil
}

// IRQInfoMsg mirrors VFIO_USER_DEVICE_GET_IRQ_INFO, request and reply
// (vfio-user.rst, "VFIO_USER_DEVICE_GET_IRQ_INFO"; struct vfio_irq_info).
type IRQInfoMsg struct {
	Argsz uint32
	Flags uint32 // IRQInfoFlag* bits
	Index uint32
	Count uint32
}

func (m IRQInfoMsg) Append(b []byte) []byte {
	b = ne.AppendUint32(b, m.Argsz)
	b = ne.AppendUint32(b, m.Flags)
	b = ne.AppendUint32(b, m.Index)
	return ne.AppendUint32(b, m.Count)
}

func DecodeIRQInfoMsg(b []byte) (IRQInfoMsg, error) {
	if len(b) < IRQInfoMsgSize {
		return IRQInfoMsg{}, errShort("irq info", IRQInfoMsgSize, len(b))
	}
	return IRQInfoMsg{
		Argsz: ne.Uint32(b[0:]),
		Flags: ne.Uint32(b[4:]),
		Index: ne.Uint32(b[8:]),
		Count: ne.Uint32(b[12:]),
	}, nil
}

// IRQSetMsg mirrors the fixed part of VFIO_USER_DEVICE_SET_IRQS
// (vfio-user.rst, "VFIO_USER_DEVICE_SET_IRQS"; struct vfio_irq_set). With
// IRQSetDataBool, Count bool bytes follow; eventfds travel as SCM_RIGHTS.
type IRQSetMsg struct {
	Argsz uint32
	Flags uint32 // IRQSet* bits
	Index uint32
	Start uint32
	Count uint32
}

func (m IRQSetMsg) Append(b []byte) []byte {
	b = ne.AppendUint32(b, m.Argsz)
	b = ne.AppendUint32(b, m.Flags)
	b = ne.AppendUint32(b, m.Index)
	b = ne.AppendUint32(b, m.Start)
	return ne.AppendUint32(b, m.Count)
}

func DecodeIRQSetMsg(b []byte) (IRQSetMsg, error) {
	if len(b) < IRQSetMsgSize {
		return IRQSetMsg{}, errShort("irq set", IRQSetMsgSize, len(b))
	}
	return IRQSetMsg{
		Argsz: ne.Uint32(b[0:]),
		Flags: ne.Uint32(b[4:]),
		Index: ne.Uint32(b[8:]),
		Start: ne.Uint32(b[12:]),
		Count: ne.Uint32(b[16:]),
	}, nil
}

// RegionAccessMsg mirrors the fixed part of VFIO_USER_REGION_READ and
// VFIO_USER_REGION_WRITE, request and reply (vfio-user.rst,
// "VFIO_USER_REGION_READ"); Count data bytes follow where the table has data.
type RegionAccessMsg struct {
	Offset uint64
	Region uint32
	Count  uint32
}

func (m RegionAccessMsg) Append(b []byte) []byte {
	b = ne.AppendUint64(b, m.Offset)
	b = ne.AppendUint32(b, m.Region)
	return ne.AppendUint32(b, m.Count)
}

func DecodeRegionAccessMsg(b []byte) (RegionAccessMsg, error) {
	if len(b) < RegionAccessSize {
		return RegionAccessMsg{}, errShort("region access", RegionAccessSize, len(b))
	}
	return RegionAccessMsg{Offset: ne.Uint64(b[0:]), Region: ne.Uint32(b[8:]), Count: ne.Uint32(b[12:])}, nil
}

// DMAAccessMsg mirrors the fixed part of VFIO_USER_DMA_READ and
// VFIO_USER_DMA_WRITE requests (vfio-user.rst, "VFIO_USER_DMA_READ"). These
// go server to client; this server never sends them (it mmaps guest RAM).
type DMAAccessMsg struct {
	Addr  uint64
	Count uint64
}

func (m DMAAccessMsg) Append(b []byte) []byte {
	b = ne.AppendUint64(b, m.Addr)
	return ne.AppendUint64(b, m.Count)
}

func DecodeDMAAccessMsg(b []byte) (DMAAccessMsg, error) {
	if len(b) < DMAAccessSize {
		return DMAAccessMsg{}, errShort("dma access", DMAAccessSize, len(b))
	}
	return DMAAccessMsg{Addr: ne.Uint64(b[0:]), Count: ne.Uint64(b[8:])}, nil
}

// WriteMultiMsg mirrors the fixed part of VFIO_USER_REGION_WRITE_MULTI,
// request and reply (vfio-user.rst, "VFIO_USER_REGION_WRITE_MULTI"); in a
// request WrCnt WriteOne entries follow.
type WriteMultiMsg struct {
	WrCnt uint64
}

func (m WriteMultiMsg) Append(b []byte) []byte { return ne.AppendUint64(b, m.WrCnt) }

func DecodeWriteMultiMsg(b []byte) (WriteMultiMsg, error) {
	if len(b) < WriteMultiSize {
		return WriteMultiMsg{}, errShort("write multi", WriteMultiSize, len(b))
	}
	return WriteMultiMsg{WrCnt: ne.Uint64(b)}, nil
}

// WriteOne mirrors one entry of VFIO_USER_REGION_WRITE_MULTI (vfio-user.rst,
// "Single Device Write Format"). Only Data[:Count] is meaningful.
type WriteOne struct {
	Offset uint64
	Region uint32
	Count  uint32
	Data   [WriteOneMaxData]byte
}

func (m WriteOne) Append(b []byte) []byte {
	b = ne.AppendUint64(b, m.Offset)
	b = ne.AppendUint32(b, m.Region)
	b = ne.AppendUint32(b, m.Count)
	return append(b, m.Data[:]...)
}

func DecodeWriteOne(b []byte) (WriteOne, error) {
	if len(b) < WriteOneSize {
		return WriteOne{}, errShort("write multi entry", WriteOneSize, len(b))
	}
	w := WriteOne{Offset: ne.Uint64(b[0:]), Region: ne.Uint32(b[8:]), Count: ne.Uint32(b[12:])}
	copy(w.Data[:], b[16:24])
	return w, nil
}

// DeviceFeatureMsg mirrors the fixed part of VFIO_USER_DEVICE_FEATURE
// (vfio-user.rst, "VFIO_USER_DEVICE_FEATURE"; struct vfio_device_feature);
// feature data follows.
type DeviceFeatureMsg struct {
	Argsz uint32
	Flags uint32 // feature index in bits 0-15, GET/SET/PROBE in 16-18
}

func (m DeviceFeatureMsg) Append(b []byte) []byte {
	b = ne.AppendUint32(b, m.Argsz)
	return ne.AppendUint32(b, m.Flags)
}

func DecodeDeviceFeatureMsg(b []byte) (DeviceFeatureMsg, error) {
	if len(b) < DeviceFeatureSize {
		return DeviceFeatureMsg{}, errShort("device feature", DeviceFeatureSize, len(b))
	}
	return DeviceFeatureMsg{Argsz: ne.Uint32(b[0:]), Flags: ne.Uint32(b[4:])}, nil
}

// MigDataMsg mirrors the fixed part of VFIO_USER_MIG_DATA_READ and
// VFIO_USER_MIG_DATA_WRITE (vfio-user.rst, "VFIO_USER_MIG_DATA_READ"); data
// follows in a read reply and a write request.
type MigDataMsg struct {
	Argsz uint32
	Size  uint32
}

func (m MigDataMsg) Append(b []byte) []byte {
	b = ne.AppendUint32(b, m.Argsz)
	return ne.AppendUint32(b, m.Size)
}

func DecodeMigDataMsg(b []byte) (MigDataMsg, error) {
	if len(b) < MigDataSize {
		return MigDataMsg{}, errShort("mig data", MigDataSize, len(b))
	}
	return MigDataMsg{Argsz: ne.Uint32(b[0:]), Size: ne.Uint32(b[4:])}, nil
}
