package stream

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/cespare/xxhash/v2"

	"github.com/gmig-dev/gmig/abi"
)

// Stream header (docs/migration-stream.md §2).
const (
	// Magic opens every stream.
	Magic = "GMIGSTRM"
	// Version is the format version this package writes and the only
	// one it reads. A changed format gets a new number; see §6. Version 4
	// put a PageBatch's record headers before its pages and made its CRC
	// cover the headers only (each page is covered by its own hash), so
	// neither side makes a CRC pass over page data and a reader can read
	// pages straight into the destination.
	Version = 4
	// Version3 is the previous version (ShardHeader sections, page records
	// interleaved with their data, a CRC over all of a PageBatch). A
	// reader refuses it, naming it (ErrVersion): the PageBatch layout
	// changed.
	Version3 = 3
	// HeaderSize is the stream header's size: magic, u16 version, u16
	// flags (0), u32 reserved (0).
	HeaderSize = 16
)

// Section frame (docs/migration-stream.md §3).
const (
	// FrameHeaderSize is the bytes before a payload: u8 type, u8 flags
	// (0), u16 reserved (0), u32 payload length.
	FrameHeaderSize = 8
	// FrameTrailerSize is the CRC-32C (Castagnoli) after a payload, taken
	// over the frame header and the payload — of a PageBatch, over the
	// frame header, the page count and the record headers only (§3).
	FrameTrailerSize = 4
)

// PageBatch payload (docs/migration-stream.md §4).
const (
	// PageSize is the graphics page size (docs/device-abi.md §1).
	PageSize = abi.PageSize
	// BatchHeaderSize is the u32 page count that opens a PageBatch.
	BatchHeaderSize = 4
	// RecordHeaderSize is a page record's header: u32 page index, u8
	// flags, 3 reserved bytes, u64 xxhash64 of the page. A batch's
	// headers come first, then the data of its non-zero pages in record
	// order.
	RecordHeaderSize = 16
	// RecordZero in a record's flags marks an all-zero page: no data
	// follows and the hash is that of PageSize zero bytes.
	RecordZero = 0x01
)

// Default limits (docs/migration-stream.md §5).
const (
	// DefaultMaxBatchPages is a Reader's default page limit per batch; a
	// Writer made by NewWriter sends batches of at most DefaultBatchPages,
	// well under it.
	DefaultMaxBatchPages = 4096
	// DefaultMaxBlob is a Reader's default payload limit for blob sections,
	// and the largest blob a Writer sends.
	DefaultMaxBlob = 64 << 20
	// DefaultBatchPages is the number of pages a Writer made by NewWriter
	// puts in one batch: 1 MiB of data, small enough to stay in cache
	// between copying and sending.
	DefaultBatchPages = 256
	// maxBatchPagesLimit is the most pages whose records fit a u32 payload
	// length.
	maxBatchPagesLimit = (1<<32 - 1 - BatchHeaderSize) / (RecordHeaderSize + PageSize)
)

// SectionType says what a section's payload holds
// (docs/migration-stream.md §3.1).
type SectionType uint8

// Section types (docs/migration-stream.md §3.1). Every other value is
// reserved for later versions and refused by this reader.
const (
	PageBatch   SectionType = 0x01 // graphics pages, §4
	DeviceState SectionType = 0x02 // the encoded vgpu.State; at most one per stream
	APILog      SectionType = 0x03 // the compacted API log
	FrontEnd    SectionType = 0x04 // the guest's PCI config writes, for the front end
	Meta        SectionType = 0x05 // free-form metadata (names, sizes, timings)
	GuestRAM    SectionType = 0x06 // guest RAM the device wrote, §3.1
	ShardHeader SectionType = 0x07 // opens a shard stream, §3.3 (since version 3)
	End         SectionType = 0xff // last section; empty payload
)

func (t SectionType) String() string {
	switch t {
	case PageBatch:
		return "PageBatch"
	case DeviceState:
		return "DeviceState"
	case APILog:
		return "APILog"
	case FrontEnd:
		return "FrontEnd"
	case Meta:
		return "Meta"
	case GuestRAM:
		return "GuestRAM"
	case ShardHeader:
		return "ShardHeader"
	case End:
		return "End"
	}
	return fmt.Sprintf("SectionType(%#02x)", uint8(t))
}

// IsBlob reports whether t's payload is an opaque blob.
func (t SectionType) IsBlob() bool {
	switch t {
	case DeviceState, APILog, FrontEnd, Meta, GuestRAM:
		return true
	}
	return false
}

func (t SectionType) known() bool {
	return t == PageBatch || t == End || t == ShardHeader || t.IsBlob()
}

// Errors a Reader or Writer returns, wrapped with where they happened.
// A truncated stream wraps io.ErrUnexpectedEOF instead.
var (
	ErrMagic        = errors.New("stream: not a migration stream (bad magic)")
	ErrVersion      = errors.New("stream: unknown format version")
	ErrReserved     = errors.New("stream: reserved field or flag set")
	ErrSectionType  = errors.New("stream: unknown section type")
	ErrTooLarge     = errors.New("stream: over limit")
	ErrMalformed    = errors.New("stream: malformed section")
	ErrChecksum     = errors.New("stream: section checksum mismatch")
	ErrPageIndex    = errors.New("stream: page index out of range")
	ErrPageHash     = errors.New("stream: page hash mismatch")
	ErrDuplicate    = errors.New("stream: duplicate section")
	ErrTrailingData = errors.New("stream: data after End")
	ErrClosed       = errors.New("stream: writer closed")
	ErrPageClaimed  = errors.New("stream: page already received on another stream in this phase")
)

// Stats counts what a Writer sent or a Reader received.
type Stats struct {
	Sections  uint64 // sections, End included
	Pages     uint64 // page records, zero pages included
	ZeroPages uint64 // page records sent as RecordZero, without data
	Bytes     uint64 // bytes on the wire, stream header and framing included
}

func (s *Stats) add(o Stats) {
	s.Sections += o.Sections
	s.Pages += o.Pages
	s.ZeroPages += o.ZeroPages
	s.Bytes += o.Bytes
}

var (
	le         = binary.LittleEndian
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
	zeroPage   [PageSize]byte
	// zeroHash is the xxhash64 of a zero page, the hash every RecordZero
	// record carries.
	zeroHash = xxhash.Sum64(zeroPage[:])
)

// isZero reports whether page is all zeros. bytes.Equal against a zero
// page runs at memcmp speed and stops at the first nonzero byte.
func isZero(page []byte) bool { return bytes.Equal(page, zeroPage[:]) }
