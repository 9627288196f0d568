package vfio

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
)

// wireCases lists every wire struct with its specified size, a sample value
// and its decoder, for the size and round-trip tests.
var wireCases = []struct {
	name   string
	size   int
	value  interface{ Append([]byte) []byte }
	decode func([]byte) (any, error)
}{
	{"Header", HeaderSize, Header{ID: 7, Command: CmdRegionRead, Size: 48, Flags: FlagTypeReply | FlagError, Error: 22},
		func(b []byte) (any, error) { return DecodeHeader(b) }},
	{"VersionMsg", VersionMsgSize, VersionMsg{Major: 0, Minor: 3},
		func(b []byte) (any, error) { return DecodeVersionMsg(b) }},
	{"DMAMapMsg", DMAMapMsgSize, DMAMapMsg{Argsz: 32, Flags: DMAProtRead | DMAProtWrite, Offset: 1 << 40, Addr: 0xfee00000, Size: 1 << 30},
		func(b []byte) (any, error) { return DecodeDMAMapMsg(b) }},
	{"DMAUnmapMsg", DMAUnmapMsgSize, DMAUnmapMsg{Argsz: 24, Flags: DMAUnmapFlagAll, Addr: 0x1000, Size: 0x2000},
		func(b []byte) (any, error) { return DecodeDMAUnmapMsg(b) }},
	{"DeviceInfoMsg", DeviceInfoMsgSize, DeviceInfoMsg{Argsz: 16, Flags: 3, NumRegions: 9, NumIRQs: 5},
		func(b []byte) (any, error) { return DecodeDeviceInfoMsg(b) }},
	{"RegionInfoMsg", RegionInfoMsgSize, RegionInfoMsg{Argsz: 72, Flags: 0xf, Index: 2, CapOffset: 32, Size: 1 << 20, Offset: 1 << 33},
		func(b []byte) (any, error) { return DecodeRegionInfoMsg(b) }},
	{"CapHeader", CapHeaderSize, CapHeader{ID: CapIDSparseMmap, Version: 1, Next: 0x40},
		func(b []byte) (any, error) { return DecodeCapHeader(b) }},
	{"SparseMmapCap", SparseMmapCapSize, SparseMmapCap{NrAreas: 2, Reserved: 0},
		func(b []byte) (any, error) { return DecodeSparseMmapCap(b) }},
	{"SparseArea", SparseAreaSize, SparseArea{Offset: 0x1000, Size: 0x3000},
		func(b []byte) (any, error) { return DecodeSparseArea(b) }},
	{"RegionIOFDsMsg", RegionIOFDsSize, RegionIOFDsMsg{Argsz: 16, Index: 0, Count: 1},
		func(b []byte) (any, error) { return DecodeRegionIOFDsMsg(b) }},
	{"IRQInfoMsg", IRQInfoMsgSize, IRQInfoMsg{Argsz: 16, Flags: 7, Index: 0, Count: 1},
		func(b []byte) (any, error) { return DecodeIRQInfoMsg(b) }},
	{"IRQSetMsg", IRQSetMsgSize, IRQSetMsg{Argsz: 20, Flags: IRQSetDataEventfd | IRQSetActionTrigger, Index: 1, Start: 0, Count: 1},
		func(b []byte) (any, error) { return DecodeIRQSetMsg(b) }},
	{"RegionAccessMsg", RegionAccessSize, RegionAccessMsg{Offset: 0x10, Region: 7, Count: 4},
		func(b []byte) (any, error) { return DecodeRegionAccessMsg(b) }},
	{"DMAAccessMsg", DMAAccessSize, DMAAccessMsg{Addr: 0x8000, Count: 64},
		func(b []byte) (any, error) { return DecodeDMAAccessMsg(b) }},
	{"WriteMultiMsg", WriteMultiSize, WriteMultiMsg{WrCnt: 3},
		func(b []byte) (any, error) { return DecodeWriteMultiMsg(b) }},
	{"WriteOne", WriteOneSize, WriteOne{Offset: 0x20, Region: 0, Count: 4, Data: [8]byte{1, 2, 3, 4}},
		func(b []byte) (any, error) { return DecodeWriteOne(b) }},
	{"DeviceFeatureMsg", DeviceFeatureSize, DeviceFeatureMsg{Argsz: 16, Flags: 1<<16 | 2},
		func(b []byte) (any, error) { return DecodeDeviceFeatureMsg(b) }},
	{"MigDataMsg", MigDataSize, MigDataMsg{Argsz: 8, Size: 4096},
		func(b []byte) (any, error) { return DecodeMigDataMsg(b) }},
	{"MigrationFeature", MigrationFeatSize, MigrationFeature{Flags: MigrationStopCopy | MigrationPreCopy},
		func(b []byte) (any, error) { return DecodeMigrationFeature(b) }},
	{"MigStateFeature", MigStateFeatSize, MigStateFeature{DeviceState: uint32(MigStateStopCopy), DataFD: -1},
		func(b []byte) (any, error) { return DecodeMigStateFeature(b) }},
	{"MigDataSizeFeature", MigDataSizeFeatSz, MigDataSizeFeature{StopCopyLength: 1 << 33},
		func(b []byte) (any, error) { return DecodeMigDataSizeFeature(b) }},
	{"DMALoggingControl", DMALoggingControlSize, DMALoggingControl{PageSize: 4096, NumRanges: 2},
		func(b []byte) (any, error) { return DecodeDMALoggingControl(b) }},
	{"DMALoggingRange", DMALoggingRangeSize, DMALoggingRange{IOVA: 1 << 32, Length: 1 << 30},
		func(b []byte) (any, error) { return DecodeDMALoggingRange(b) }},
	{"DMALoggingReport", DMALoggingReportSize, DMALoggingReport{IOVA: 0x100000, Length: 1 << 20, PageSize: 4096},
		func(b []byte) (any, error) { return DecodeDMALoggingReport(b) }},
}

// TestWireSizes checks each struct against the size the specification's
// table gives: the Go struct's packed size and its encoding.
func TestWireSizes(t *testing.T) {
	for _, c := range wireCases {
		if got := binary.Size(c.value); got != c.size {
			t.Errorf("%s: struct size %d, spec %d", c.name, got, c.size)
		}
		if got := len(c.value.Append(nil)); got != c.size {
			t.Errorf("%s: encoded size %d, spec %d", c.name, got, c.size)
		}
	}
}

// TestWireLayout checks encodings against encoding/binary's packing of the
// same struct, so field order and padding follow the declarations.
func TestWireLayout(t *testing.T) {
	for _, c := range wireCases {
		want, err := binary.Append(nil, binary.NativeEndian, c.value)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := c.value.Append(nil); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: encoding % x, packed % x", c.name, got, want)
		}
	}
}

func TestWireRoundTrip(t *testing.T) {
	for _, c := range wireCases {
		b := c.value.Append([]byte{0xaa}) // appends after existing bytes
		got, err := c.decode(b[1:])
		if err != nil {
			t.Fatalf("%s: decode: %v", c.name, err)
		}
		if !reflect.DeepEqual(got, c.value) {
			t.Errorf("%s: round trip %+v, want %+v", c.name, got, c.value)
		}
	}
}

func TestWireDecodeShort(t *testing.T) {
	for _, c := range wireCases {
		b := c.value.Append(nil)
		for n := range len(b) {
			if _, err := c.decode(b[:n]); !errors.Is(err, ErrShort) {
				t.Fatalf("%s: decode of %d bytes: %v, want ErrShort", c.name, n, err)
			}
		}
	}
}

func TestVersionRoundTrip(t *testing.T) {
	b := encodeVersion(VersionMsg{Major: 0, Minor: 0}, clientCaps)
	if b[len(b)-1] != 0 {
		t.Fatal("version data not NUL-terminated")
	}
	v, caps, err := decodeVersion(b)
	if err != nil {
		t.Fatal(err)
	}
	if v != (VersionMsg{}) || !reflect.DeepEqual(caps, clientCaps) {
		t.Errorf("got %+v %+v", v, caps)
	}
	// QEMU 11.1's proposal (docs/testing.md, "QEMU 11.1 and vfio-user"), migration included.
	qemu := `{"capabilities":{"migration":{"max_bitmap_size":268435456,"pgsize":4096},"max_msg_fds":16,` +
		`"max_data_xfer_size":1048576,"pgsizes":4096,"max_dma_maps":65535,"write_multiple":true}}`
	_, caps, err = decodeVersion(append(append(VersionMsg{}.Append(nil), qemu...), 0))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(caps, clientCaps) {
		t.Errorf("QEMU capabilities decoded as %+v", caps)
	}
	for _, bad := range []string{`{"capabilities":{}}`, "{\x00", "[]\x00", `{"capabilities":{"max_msg_fds":-1}}` + "\x00"} {
		if _, _, err := decodeVersion(append(VersionMsg{}.Append(nil), bad...)); !errors.Is(err, ErrInvalid) {
			t.Errorf("decodeVersion(%q): %v, want ErrInvalid", bad, err)
		}
	}
}
