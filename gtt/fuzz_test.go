package gtt

import (
	"encoding/binary"
	"testing"

	"github.com/gmig-dev/gmig/abi"
)

// FuzzWrite feeds arbitrary (index, entry) sequences, with occasional
// remaps, and checks after every step that each shadow entry is either
// unmapped or a page inside [base, base+pages*4096) carrying the guest
// entry's flags, that refused writes change nothing, and that Resolve never
// returns memory outside the partition.
func FuzzWrite(f *testing.F) {
	seed := func(ops ...uint64) []byte {
		var b []byte
		for _, op := range ops {
			b = binary.LittleEndian.AppendUint64(b, op)
		}
		return b
	}
	f.Add(seed(0, ent(1, V|W)), uint8(0))
	f.Add(seed(3, ent(7, V), 3, 0, 3, ent(8, V|W)), uint8(5))
	f.Add(seed(15, abi.GTTPageMask|V), uint8(0xff))
	f.Add(seed(1<<32-1, ent(1, V), 2, 1<<63|V), uint8(1))
	f.Add(seed(4, ent(2, W|1<<7), 5, ^uint64(0)), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, geometry uint8) {
		entries := uint32(geometry%16) + 1
		pages := uint64(geometry>>4) + 1
		base := uint64(geometry) * pg
		tb := newTable(t, entries, base, pages)
		for len(data) >= 16 {
			op := binary.LittleEndian.Uint64(data)
			entry := binary.LittleEndian.Uint64(data[8:])
			data = data[16:]
			if op>>62 == 3 { // migrate: the same guest view onto another base
				base = (op >> 12 % 1024) * pg
				moved := newTable(t, entries, base, pages)
				if err := moved.Restore(tb.Save()); err != nil {
					t.Fatalf("Restore at %#x: %v", base, err)
				}
				tb = moved
				checkInvariant(t, tb, base, pages)
				continue
			}
			index := uint32(op)
			before, _ := tb.Read(index % entries)
			err := tb.Write(index, entry)
			if err == nil {
				if got, _ := tb.Read(index); got != entry {
					t.Fatalf("entry %d reads %#x after writing %#x", index, got, entry)
				}
			} else if got, _ := tb.Read(index % entries); index < entries && got != before {
				t.Fatalf("refused write changed entry %d: %#x -> %#x", index, before, got)
			}
			checkInvariant(t, tb, base, pages)
		}
	})
}

// checkInvariant verifies the shadow against the guest entries and the
// partition [base, base+pages*4096).
func checkInvariant(t *testing.T, tb *Table, base, pages uint64) {
	t.Helper()
	tb.mu.RLock()
	defer tb.mu.RUnlock()
	end := base + pages*pg
	for i, s := range tb.shadow {
		g := tb.guest[i]
		if g&abi.GTTReservedMask != 0 {
			t.Fatalf("entry %d holds reserved bits: %#x", i, g)
		}
		if s == 0 {
			if g&V != 0 {
				t.Fatalf("valid entry %d (%#x) has no shadow", i, g)
			}
			continue
		}
		off := s & shadowOffMask
		if off < base || off+pg > end {
			t.Fatalf("shadow %d = %#x outside [%#x, %#x)", i, s, base, end)
		}
		if s&abi.GTTFlagsMask != g&abi.GTTFlagsMask || s&^shadowOffMask&^abi.GTTFlagsMask != 0 {
			t.Fatalf("shadow %d = %#x does not carry guest flags of %#x", i, s, g)
		}
	}
	for i := range tb.entries {
		tb.mu.RUnlock()
		xs, err := tb.Resolve(uint64(i)*pg, pg, false)
		tb.mu.RLock()
		for _, x := range xs {
			if err != nil || x.Off < base || x.Off+x.Len > end {
				t.Fatalf("Resolve of page %d: %v, %v outside [%#x, %#x)", i, xs, err, base, end)
			}
		}
	}
}
