package nvidia

import (
	"encoding/binary"
	"testing"

	"github.com/gmig-dev/gmig/gtt"
)

// TestLandedAfterWriteBack: a command's output reaches the window only at
// the write-back, and Landed is told then, with the window range, once the
// bytes are there (a migration that read the page in between must hear of
// it again: hostd's TestMigrateCUDABetweenGPUs lost such pages without it).
func TestLandedAfterWriteBack(t *testing.T) {
	win := make([]byte, 1<<20)
	var got [][2]uint64
	var seen []uint32
	b, err := NewNVIDIA(NVIDIAConfig{GPU: NewModelGPU(), Window: win, Landed: func(off, n uint64) {
		got = append(got, [2]uint64{off, n})
		seen = append(seen, binary.LittleEndian.Uint32(win[off:]))
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	const off, n = 3*4096 + 64, 256
	if err := b.Fill([]gtt.Extent{{Off: off, Len: n}}, 0xabcd1234); err != nil {
		t.Fatal(err)
	}
	if len(got) != 0 || win[off] != 0 {
		t.Fatalf("before the write-back: window byte %#x, Landed %v; want 0 and nothing", win[off], got)
	}
	if err := b.Sync(); err != nil {
		t.Fatal(err)
	}
	for i, r := range got {
		if seen[i] != 0xabcd1234 {
			t.Errorf("Landed [%#x, +%d) told before the bytes arrived: %#x there", r[0], r[1], seen[i])
		}
	}
	for x := uint64(off); x < off+n; x += 4 {
		covered := false
		for _, r := range got {
			covered = covered || r[0] <= x && x < r[0]+r[1]
		}
		if !covered {
			t.Fatalf("Landed %v after the write-back leaves %#x out", got, x)
		}
	}
}
