package precopy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/gmig-dev/gmig/precopy/stream"
)

// FuzzGuestRAM feeds arbitrary GuestRAM section payloads to the
// destination's decoder, on top of guest RAM already carried (up to the
// limit, so the fuzzer reaches MaxGuestRAM). It must never panic; a payload
// is either refused with errGuestRAM, leaving what was carried as it was,
// or taken whole: its records, each one non-empty range inside one page,
// re-encode to the payload, none of the payload's memory is retained, and
// the total never passes MaxGuestRAM.
func FuzzGuestRAM(f *testing.F) {
	rec := func(gpa uint64, data ...byte) []byte {
		b := binary.LittleEndian.AppendUint64(nil, gpa)
		b = binary.LittleEndian.AppendUint32(b, uint32(len(data)))
		return append(b, data...)
	}
	f.Add(uint32(0), rec(0x3008, 1, 2, 3, 4, 5, 6, 7, 8))
	f.Add(uint32(0), append(rec(0x1000, bytes.Repeat([]byte{9}, stream.PageSize)...), rec(0x2ffc, 1, 2, 3, 4)...))
	f.Add(uint32(MaxGuestRAM-4), append(rec(0, 1, 2), rec(0x5000, 3, 4, 5)...))
	f.Add(uint32(0), append(rec(^uint64(0)-3, 1, 2, 3, 4), 0))
	f.Add(uint32(0), rec(0x1ff0, make([]byte, 32)...))
	f.Add(uint32(0), []byte{})
	f.Fuzz(func(t *testing.T, carried uint32, b []byte) {
		g := &GuestRAM{}
		if carried <= MaxGuestRAM {
			g.recs = []guestRAMRec{{gpa: 0x7000, data: []byte{1}}}
			g.bytes = uint64(carried)
		}
		before := *g
		in := bytes.Clone(b)
		err := g.add(b)
		if g.bytes > MaxGuestRAM {
			t.Fatalf("%d bytes carried, more than MaxGuestRAM", g.bytes)
		}
		if err != nil {
			if !errors.Is(err, errGuestRAM) {
				t.Fatalf("refused with %v, not errGuestRAM", err)
			}
			if g.bytes != before.bytes || len(g.recs) != len(before.recs) {
				t.Fatalf("a refused payload was kept: %d ranges and %d bytes, were %d and %d", len(g.recs), g.bytes, len(before.recs), before.bytes)
			}
			return
		}
		clear(b) // nothing of b may be retained
		var enc []byte
		sum := before.bytes
		for _, r := range g.recs[len(before.recs):] {
			if len(r.data) == 0 || r.gpa%stream.PageSize+uint64(len(r.data)) > stream.PageSize {
				t.Fatalf("range at %#x of %d bytes is empty or crosses a page", r.gpa, len(r.data))
			}
			enc = append(enc, rec(r.gpa, r.data...)...)
			sum += uint64(len(r.data))
		}
		if !bytes.Equal(enc, in) {
			t.Fatalf("records re-encode to % x, the payload was % x", enc, in)
		}
		if g.bytes != sum {
			t.Fatalf("Bytes %d, the records hold %d", g.bytes, sum)
		}
	})
}
