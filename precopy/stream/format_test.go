package stream

import (
	"bytes"
	"encoding/hex"
	"strings"
	"testing"
)

// The smallest stream is byte for byte the example in
// docs/migration-stream.md §9.
func TestEmptyStreamMatchesDoc(t *testing.T) {
	want, _ := hex.DecodeString(strings.ReplaceAll(
		"47 4d 49 47 53 54 52 4d 04 00 00 00 00 00 00 00 ff 00 00 00 00 00 00 00 2f 82 3d 93", " ", ""))
	var buf bytes.Buffer
	w, err := NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), want) {
		t.Errorf("empty stream\n got % x\nwant % x", buf.Bytes(), want)
	}
}

// Sizes and values stated in docs/migration-stream.md §2-§5.
func TestLayout(t *testing.T) {
	if zeroHash != 0xac869b6f32d8bbdb {
		t.Errorf("zero page hash %#x", zeroHash)
	}
	if PageSize != 4096 || HeaderSize != len(header(Version, 0, 0)) {
		t.Errorf("page %d, header %d", PageSize, HeaderSize)
	}
	if got := (Limits{MaxBatchPages: DefaultMaxBatchPages}).maxBatchPayload(); got != 16842756 {
		t.Errorf("largest default batch payload %d", got)
	}
	if maxBatchPagesLimit != 1044495 {
		t.Errorf("maxBatchPagesLimit %d", maxBatchPagesLimit)
	}
	// One data page and one zero page: 8 + 4 + 16 + 16 + 4096 + 4, the
	// record headers before the data.
	mem := append(filledPage(1), make([]byte, PageSize)...)
	var buf bytes.Buffer
	w, _ := NewWriter(&buf)
	st, err := w.WritePages([]uint32{0, 1}, mem, nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := uint64(8 + 4 + 16 + 4096 + 16 + 4); st.Bytes != want || uint64(buf.Len()) != HeaderSize+want {
		t.Errorf("batch is %d bytes (stream %d), want %d", st.Bytes, buf.Len(), want)
	}
	b := buf.Bytes()[HeaderSize:]
	if b[0] != byte(PageBatch) || le.Uint32(b[4:]) != 4+16+4096+16 || le.Uint32(b[8:]) != 2 {
		t.Errorf("frame header % x", b[:12])
	}
	dataRec, zeroRec := b[12:], b[12+16:]
	if le.Uint32(dataRec) != 0 || dataRec[4] != 0 || le.Uint64(dataRec[8:]) != hashOf(filledPage(1)) {
		t.Errorf("data record % x", dataRec[:16])
	}
	if le.Uint32(zeroRec) != 1 || zeroRec[4] != RecordZero || le.Uint64(zeroRec[8:]) != zeroHash {
		t.Errorf("zero record % x", zeroRec[:16])
	}
	if !bytes.Equal(b[12+32:12+32+PageSize], filledPage(1)) {
		t.Error("page data does not follow the record headers")
	}
}

func TestSectionTypes(t *testing.T) {
	for ty, name := range map[SectionType]string{PageBatch: "PageBatch", DeviceState: "DeviceState", APILog: "APILog",
		FrontEnd: "FrontEnd", Meta: "Meta", GuestRAM: "GuestRAM", ShardHeader: "ShardHeader", End: "End", 8: "SectionType(0x08)"} {
		if ty.String() != name {
			t.Errorf("%d: %q, want %q", uint8(ty), ty, name)
		}
	}
	for ty := range 256 {
		st := SectionType(ty)
		want := ty >= 1 && ty <= 7 || ty == 0xff
		if st.known() != want {
			t.Errorf("%v known = %v", st, st.known())
		}
		if st.IsBlob() != (ty >= 2 && ty <= 6) {
			t.Errorf("%v IsBlob = %v", st, st.IsBlob())
		}
	}
}
