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

// DEVICE_FEATURE flags: vfio-user.rst, "VFIO_USER_DEVICE_FEATURE";
// linux/vfio.h VFIO_DEVICE_FEATURE_MASK/GET/SET/PROBE.
const (
	DeviceFeatureMask  uint32 = 0xffff  // bits 0-15: feature index
	DeviceFeatureGet   uint32 = 1 << 16 // VFIO_DEVICE_FEATURE_GET
	DeviceFeatureSet   uint32 = 1 << 17 // VFIO_DEVICE_FEATURE_SET
	DeviceFeatureProbe uint32 = 1 << 18 // VFIO_DEVICE_FEATURE_PROBE
)

// Feature indices: vfio-user.rst, "Device Features" (1, 2, 6-8); MIG_DATA_SIZE
// is linux/vfio.h's VFIO_DEVICE_FEATURE_MIG_DATA_SIZE, which the vfio-user
// table does not list but this server answers.
const (
	FeatureMigration       uint32 = 1 // VFIO_DEVICE_FEATURE_MIGRATION
	FeatureMigDeviceState  uint32 = 2 // VFIO_DEVICE_FEATURE_MIG_DEVICE_STATE
	FeatureDMALoggingStart uint32 = 6 // VFIO_DEVICE_FEATURE_DMA_LOGGING_START
	FeatureDMALoggingStop  uint32 = 7 // VFIO_DEVICE_FEATURE_DMA_LOGGING_STOP
	FeatureDMALoggingRep   uint32 = 8 // VFIO_DEVICE_FEATURE_DMA_LOGGING_REPORT
	FeatureMigDataSize     uint32 = 9 // VFIO_DEVICE_FEATURE_MIG_DATA_SIZE
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
	MigrationFeatSize = 8
	MigStateFeatSize  = 8
	MigDataSizeFeatSz = 8

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
