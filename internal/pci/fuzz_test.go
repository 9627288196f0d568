package pci

import (
	"testing"
)

// FuzzConfigWrite applies arbitrary writes (offset, size and bytes taken
// from the input, 3-byte records plus data) and checks that nothing panics,
// out-of-range writes are refused, read-only bits keep their power-on
// values, BAR address bits below the size stay clear, and Writes replays to
// the same writable state.
func FuzzConfigWrite(f *testing.F) {
	f.Add([]byte{0x10, 4, 0xff, 0xff, 0xff, 0xff})
	f.Add([]byte{0x00, 0xff, 0xff, 0x3c, 1, 0x0b, 0x52, 2, 0x01, 0x00})
	f.Add([]byte{0x1a, 4, 0, 0xc0, 0x12, 0, 0xfe, 4, 1, 2, 3, 4})
	f.Add([]byte{0x04, 2, 0xff, 0xff, 0x30, 4, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := New(gmigID, gmigBARs(apertureSize), true)
		if err != nil {
			t.Fatal(err)
		}
		for len(data) >= 2 {
			off, n := uint64(data[0]), int(data[1])
			data = data[2:]
			p := data[:min(n, len(data))]
			data = data[len(p):]
			err := c.Write(off, p)
			if inRange := len(p) >= 1 && off+uint64(len(p)) <= Size; inRange != (err == nil) {
				t.Fatalf("Write(%#x, %d bytes) = %v", off, len(p), err)
			}
			checkReadOnly(t, c)
		}
		replayed, _ := New(gmigID, gmigBARs(apertureSize), true)
		for _, w := range c.Writes() {
			var b [4]byte
			b[0], b[1], b[2], b[3] = byte(w.Value), byte(w.Value>>8), byte(w.Value>>16), byte(w.Value>>24)
			if err := replayed.Write(uint64(w.Offset), b[:w.Size]); err != nil {
				t.Fatal(err)
			}
		}
		if replayed.Save().Space != c.Save().Space {
			t.Fatalf("Writes %v does not replay to the same space", c.Writes())
		}
	})
}

func checkReadOnly(t *testing.T, c *Config) {
	t.Helper()
	var s [Size]byte
	if err := c.Read(0, s[:]); err != nil {
		t.Fatal(err)
	}
	for o := range Size {
		if (s[o]^c.reset[o])&^c.wmask[o] != 0 {
			t.Fatalf("read-only bits of byte %#x changed: %#02x, power-on %#02x", o, s[o], c.reset[o])
		}
	}
	if a := c.BARAddress(0); a&(1<<20-1) != 0 {
		t.Fatalf("BAR0 address %#x has bits below its size", a)
	}
	if a := c.BARAddress(2); a&(apertureSize-1) != 0 {
		t.Fatalf("BAR2 address %#x has bits below its size", a)
	}
}
