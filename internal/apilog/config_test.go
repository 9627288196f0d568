package apilog

import (
	"errors"
	"reflect"
	"slices"
	"testing"

	"github.com/gmig-dev/gmig/internal/pci"
)

// guestWrite is one config write as the guest makes it through vfio-user:
// bytes p at offset off.
type guestWrite struct {
	off uint16
	p   []byte
}

func w(off uint16, p ...byte) guestWrite { return guestWrite{off, p} }

// splitWrite turns a guest write into log entries the way
// vgpu/device.go recordConfigWrite does: one entry for an aligned
// 1-, 2- or 4-byte write, byte entries otherwise.
func splitWrite(g guestWrite) []Entry {
	n := len(g.p)
	if (n == 1 || n == 2 || n == 4) && int(g.off)%n == 0 {
		var v uint32
		for i := n - 1; i >= 0; i-- {
			v = v<<8 | uint32(g.p[i])
		}
		return []Entry{{Kind: ConfigWrite, Offset: g.off, Size: uint8(n), Arg: v}}
	}
	es := make([]Entry, len(g.p))
	for i, b := range g.p {
		es[i] = Entry{Kind: ConfigWrite, Offset: g.off + uint16(i), Size: 1, Arg: uint32(b)}
	}
	return es
}

// configModel is a byte-array front end: replayed config writes land in
// space, and it notes how often each byte was written and in what order.
type configModel struct {
	space   [pci.Size]byte
	touched [pci.Size]int
	writes  []Entry
}

var errNotConfig = errors.New("not a config write")

func (m *configModel) LoadKernel(uint32, uint32) error    { return errNotConfig }
func (m *configModel) SetFenceDone(uint64) error          { return errNotConfig }
func (m *configModel) SetInterrupts(uint32, uint32) error { return errNotConfig }
func (m *configModel) WriteConfig(off uint16, size uint8, v uint32) error {
	m.writes = append(m.writes, Entry{Kind: ConfigWrite, Offset: off, Size: size, Arg: v})
	for i := range int(size) {
		m.space[int(off)+i] = byte(v >> (8 * i))
		m.touched[int(off)+i]++
	}
	return nil
}

// guestBytes is what the guest's writes leave in config space: per byte,
// the last value written and whether any write touched it.
type guestBytes struct {
	value   [pci.Size]byte
	written [pci.Size]bool
}

func (g *guestBytes) apply(e Entry) {
	if int(e.Offset)+int(e.Size) > pci.Size {
		return // outside config space: the log ignores it too
	}
	for i := range int(e.Size) {
		g.value[int(e.Offset)+i] = byte(e.Arg >> (8 * i))
		g.written[int(e.Offset)+i] = true
	}
}

// checkReplay replays the config writes of es into a fresh model and
// checks that every byte the guest wrote holds its last value, written
// exactly once, and that no other byte was written.
func checkReplay(t *testing.T, es []Entry, want *guestBytes) *configModel {
	t.Helper()
	var m configModel
	if err := Replay(es, &m); err != nil {
		t.Fatalf("replay: %v", err)
	}
	for o := range pci.Size {
		if want.written[o] && m.space[o] != want.value[o] {
			t.Errorf("byte %#x: replay leaves %#02x, the guest last wrote %#02x", o, m.space[o], want.value[o])
		}
		switch {
		case want.written[o] && m.touched[o] != 1:
			t.Errorf("byte %#x: written %d times by the replay, want once", o, m.touched[o])
		case !want.written[o] && m.touched[o] != 0:
			t.Errorf("byte %#x: the guest never wrote it, the replay wrote it %d times", o, m.touched[o])
		}
	}
	return &m
}

// TestConfigWritesKeepOrder records guest config writes of mixed sizes and
// overlaps and checks the exact compacted list and that replaying it
// leaves the bytes the guest last wrote.
func TestConfigWritesKeepOrder(t *testing.T) {
	cmd, msiCtl := uint16(pci.OffCommand), uint16(pci.OffMSIControl)
	cw := func(off uint16, size uint8, v uint32) Entry {
		return Entry{Kind: ConfigWrite, Offset: off, Size: size, Arg: v}
	}
	cases := []struct {
		name   string
		writes []guestWrite
		want   []Entry
	}{{
		// The review finding: INTx-disable (command bit 10, byte 5 bit 2)
		// written last by a byte write must survive.
		name:   "command word then its high byte",
		writes: []guestWrite{w(cmd, 0x06, 0x00), w(cmd+1, 0x04)},
		want:   []Entry{cw(cmd, 2, 0x0406)},
	}, {
		name:   "command high byte then the word",
		writes: []guestWrite{w(cmd+1, 0x04), w(cmd, 0x06, 0x00)},
		want:   []Entry{cw(cmd, 2, 0x0006)},
	}, {
		name:   "command byte alone stays a byte, still last",
		writes: []guestWrite{w(cmd, 0x02), w(0x10, 0x00, 0x00, 0x00, 0xfe)},
		want:   []Entry{cw(0x10, 4, 0xfe000000), cw(cmd, 1, 0x02)},
	}, {
		// A dword at 4 covers command and status; a later status write
		// wins for bytes 6-7, and the command register stays last.
		name:   "command+status dword then status word",
		writes: []guestWrite{w(cmd, 0x07, 0x00, 0xff, 0xff), w(pci.OffStatus, 0x00, 0x01)},
		want:   []Entry{cw(pci.OffStatus, 2, 0x0100), cw(cmd, 2, 0x0007)},
	}, {
		name:   "interrupt line byte inside an earlier dword",
		writes: []guestWrite{w(pci.OffIntLine, 0x0b, 0x01, 0x00, 0x00), w(pci.OffIntLine, 0x0a)},
		want:   []Entry{cw(pci.OffIntLine, 4, 0x0000010a)},
	}, {
		name:   "BAR probe, address, then an unaligned 3-byte write",
		writes: []guestWrite{w(0x10, 0xff, 0xff, 0xff, 0xff), w(0x10, 0x00, 0x00, 0x00, 0xfe), w(0x11, 0x10, 0x20, 0xfd)},
		want:   []Entry{cw(0x10, 4, 0xfd201000)},
	}, {
		name:   "bytes merge into words and dwords only when complete",
		writes: []guestWrite{w(0x18, 1), w(0x19, 2), w(0x1a, 3), w(0x1b, 4), w(0x20, 5), w(0x21, 6), w(0x22, 7)},
		want:   []Entry{cw(0x18, 4, 0x04030201), cw(0x20, 2, 0x0605), cw(0x22, 1, 0x07)},
	}, {
		name:   "BAR high half before the low half replays low first",
		writes: []guestWrite{w(0x14, 0x01, 0x00, 0x00, 0x00), w(0x10, 0x0c, 0x00, 0x00, 0xe0)},
		want:   []Entry{cw(0x10, 4, 0xe000000c), cw(0x14, 4, 0x00000001)},
	}, {
		// MSI enabled first, then its address and data rewritten (an
		// affinity change): the enable still replays after them.
		name: "MSI enable before its address and data",
		writes: []guestWrite{
			w(msiCtl, 0x81, 0x00), w(cmd, 0x06, 0x04),
			w(pci.OffMSIAddrLo, 0x00, 0x10, 0xe0, 0xfe), w(pci.OffMSIAddrHi, 0, 0, 0, 0), w(pci.OffMSIData, 0x41, 0x00),
		},
		want: []Entry{
			cw(pci.OffMSIAddrLo, 4, 0xfee01000), cw(pci.OffMSIAddrHi, 4, 0), cw(pci.OffMSIData, 2, 0x0041),
			cw(msiCtl, 2, 0x0081), cw(cmd, 2, 0x0406),
		},
	}, {
		// A dword at the MSI capability's start holds its (read-only)
		// header and the control word: the control word still goes after
		// address and data.
		name:   "MSI header dword with control",
		writes: []guestWrite{w(pci.MSIOffset, 0x05, 0x00, 0x81, 0x00), w(pci.OffMSIData, 0x22, 0x00)},
		want:   []Entry{cw(pci.MSIOffset, 2, 0x0005), cw(pci.OffMSIData, 2, 0x0022), cw(msiCtl, 2, 0x0081)},
	}}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			l := New()
			var want guestBytes
			raw := 0
			for _, g := range tc.writes {
				for _, e := range splitWrite(g) {
					l.Record(e)
					want.apply(e)
					raw++
				}
			}
			got := l.Compacted()
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("compacted:\n got %+v\nwant %+v", got, tc.want)
			}
			checkReplay(t, got, &want)
			st := l.Stats()
			if st.RawEntries != uint64(raw) || st.CompactedEntries != len(got) || st.CompactedBytes != len(got)*EntrySize {
				t.Errorf("stats %+v: want %d raw, %d compacted", st, raw, len(got))
			}
		})
	}
}

// Fuzz input: a sequence of operations, each a header of two bytes
// (offset, control) followed by the bytes it writes. The control byte's low
// three bits pick the operation:
//
//	0, 1, 2  a log entry of 1, 2 or 4 bytes, aligned down to its size
//	         unless bit 7 is set (Record takes unaligned entries too)
//	3 .. 6   a guest write of 1 + bits 5:3 bytes, split into entries as
//	         vgpu does; one reaching past config space is refused
//	         there and so not recorded
//	7        a device reset (Log.Reset) and a fence; writes no bytes
const (
	opEntry1, opEntry2, opEntry4 = 0, 1, 2
	opGuest                      = 3
	opReset                      = 7
	opUnaligned                  = 0x80
)

// guestOp encodes a guest write of p at off for the fuzz input.
func guestOp(off uint16, p ...byte) []byte {
	return append([]byte{byte(off), opGuest | byte(len(p)-1)<<3}, p...)
}

// FuzzConfigReplay records random config writes, compacts, replays the
// result into a byte-array front end and checks it against the bytes the
// guest last wrote, the replay order (offset order, MSI control after
// every other register, the command register last), that the writes are
// the canonical fewest, that Stats counts them, and that recording the
// compacted log again changes nothing (the destination does that).
func FuzzConfigReplay(f *testing.F) {
	cmd, msiCtl := uint16(pci.OffCommand), uint16(pci.OffMSIControl)
	f.Add(slices.Concat(guestOp(cmd, 0x06, 0x00), guestOp(cmd+1, 0x04))) // the review finding
	f.Add(slices.Concat(guestOp(cmd, 0x07, 0x00, 0xff, 0xff), guestOp(pci.OffStatus, 0x00, 0x01)))
	f.Add(slices.Concat(
		guestOp(msiCtl, 0x81, 0x00), guestOp(pci.OffMSIAddrLo, 0x00, 0x10, 0xe0, 0xfe),
		guestOp(pci.OffMSIAddrHi, 0, 0, 0, 0), guestOp(pci.OffMSIData, 0x41, 0x00), guestOp(cmd, 0x06, 0x04)))
	f.Add(slices.Concat(guestOp(0x10, 0xff, 0xff, 0xff, 0xff), guestOp(0x11, 0x10, 0x20, 0xfd),
		[]byte{0x3d, opEntry2 | opUnaligned, 0x0b, 0x01}, []byte{0, opReset}, guestOp(0xfc, 1, 2, 3, 4, 5)))
	f.Fuzz(func(t *testing.T, data []byte) {
		l := New()
		var want guestBytes
		raw := 0
		record := func(e Entry) {
			l.Record(e)
			raw++
			if e.Kind == ConfigWrite {
				want.apply(e)
			}
		}
		for len(data) >= 2 {
			off, ctl := uint16(data[0]), data[1]
			data = data[2:]
			op := ctl & 7
			if op == opReset {
				l.Reset()
				record(Entry{Kind: Fence, Value: uint64(off)})
				continue
			}
			n := 1 << op
			if op >= opGuest {
				n = 1 + int(ctl>>3&7)
			}
			if len(data) < n {
				break
			}
			p := data[:n]
			data = data[n:]
			switch {
			case op >= opGuest && int(off)+n > pci.Size:
				// refused by the vfio-user server, never recorded
			case op >= opGuest:
				for _, e := range splitWrite(guestWrite{off, p}) {
					record(e)
				}
			default:
				if ctl&opUnaligned == 0 {
					off &^= uint16(n - 1)
				}
				var v uint32
				for i := n - 1; i >= 0; i-- {
					v = v<<8 | uint32(p[i])
				}
				record(Entry{Kind: ConfigWrite, Offset: off, Size: uint8(n), Arg: v})
			}
		}

		got := l.Compacted()
		first := slices.IndexFunc(got, func(e Entry) bool { return e.Kind == ConfigWrite })
		if first < 0 {
			first = len(got)
		}
		for i, e := range got[first:] {
			if e.Kind != ConfigWrite {
				t.Fatalf("entry %d (%s) after the config writes", first+i, e.Kind)
			}
		}
		m := checkReplay(t, got[first:], &want)
		checkConfigOrder(t, m.writes)
		checkCanonical(t, m.writes, &want)
		if st := l.Stats(); st.RawEntries != uint64(raw) || st.CompactedEntries != len(got) ||
			st.CompactedBytes != len(got)*EntrySize || st.RawBytes != uint64(raw)*EntrySize {
			t.Fatalf("stats %+v: want %d raw, %d compacted", st, raw, len(got))
		}
		again := New()
		for _, e := range got {
			again.Record(e)
		}
		if re := again.Compacted(); !reflect.DeepEqual(re, got) {
			t.Fatalf("recording the compacted log again:\n got %+v\nwant %+v", re, got)
		}
	})
}

// replayGroup is where a replayed config write may sit: 0 anywhere in
// offset order, 1 after those (MSI control), 2 last (command register).
func replayGroup(e Entry) int {
	touches := func(reg uint16) bool { return e.Offset < reg+2 && reg < e.Offset+uint16(e.Size) }
	switch {
	case touches(pci.OffCommand):
		return 2
	case touches(pci.OffMSIControl):
		return 1
	}
	return 0
}

// checkConfigOrder checks the replay order of config writes ws: groups in
// order (the command register last, MSI control after every write of MSI
// address and data), offsets ascending within a group.
func checkConfigOrder(t *testing.T, ws []Entry) {
	t.Helper()
	for i := 1; i < len(ws); i++ {
		a, b := ws[i-1], ws[i]
		ga, gb := replayGroup(a), replayGroup(b)
		if ga > gb || (ga == gb && a.Offset >= b.Offset) {
			t.Fatalf("replay order: %+v (group %d) before %+v (group %d)", a, ga, b, gb)
		}
	}
	for i, e := range ws {
		if replayGroup(e) == 2 && e.Offset+uint16(e.Size) > pci.OffCommand+2 {
			t.Fatalf("write %d %+v carries more than the command register", i, e)
		}
		if replayGroup(e) == 1 && (e.Offset < pci.OffMSIControl || e.Offset+uint16(e.Size) > pci.OffMSIControl+2) {
			t.Fatalf("write %d %+v carries more than MSI control", i, e)
		}
	}
}

// checkCanonical checks that no two replayed writes could have been one:
// a byte write whose aligned word was fully written, or a word write whose
// aligned dword was fully written and holds neither the command register
// nor MSI control.
func checkCanonical(t *testing.T, ws []Entry, want *guestBytes) {
	t.Helper()
	for _, e := range ws {
		o := int(e.Offset)
		switch e.Size {
		case 1:
			if w := o &^ 1; want.written[w] && want.written[w+1] {
				t.Fatalf("%+v: both bytes of word %#x were written, want one word write", e, w)
			}
		case 2:
			d := o &^ 3
			ordered := d == pci.OffCommand || d == pci.OffMSIControl&^3
			if !ordered && want.written[d] && want.written[d+1] && want.written[d+2] && want.written[d+3] {
				t.Fatalf("%+v: all bytes of dword %#x were written, want one dword write", e, d)
			}
		}
	}
}
