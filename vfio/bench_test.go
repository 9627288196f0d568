package vfio

import "testing"

// BenchmarkRegionRead4 measures one trapped 4-byte register read, the cost
// of a guest MMIO load that goes through the socket.
func BenchmarkRegionRead4(b *testing.B) {
	ts := startServer(b, 0)
	c, err := Dial(ts.path)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 4)
	b.ResetTimer()
	for range b.N {
		if err := c.ReadRegion(fakeRegsIndex, 0x10, buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPostWriteRegion4 measures a posted 4-byte register write.
func BenchmarkPostWriteRegion4(b *testing.B) {
	ts := startServer(b, 0)
	c, err := Dial(ts.path)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	buf := make([]byte, 4)
	b.ResetTimer()
	for range b.N {
		if err := c.PostWriteRegion(fakeRegsIndex, 0x10, buf); err != nil {
			b.Fatal(err)
		}
	}
	if err := c.ReadRegion(fakeRegsIndex, 0x10, buf); err != nil { // drain
		b.Fatal(err)
	}
}
