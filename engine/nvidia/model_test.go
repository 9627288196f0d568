package nvidia

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/gmig-dev/gmig/dirty"
)

// TestGPUHasherModel checks the hasher's batching and host staging on the
// model: pages spanning several staging chunks, lists out of order.
func TestGPUHasherModel(t *testing.T) {
	g := NewModelGPU()
	pages := 2*stagePages + 100
	host := make([]byte, pages*pageBytes)
	rng := rand.New(rand.NewPCG(5, 6))
	for i := 0; i < len(host); i += 64 {
		host[i] = byte(rng.Uint32())
	}
	want := make([]uint64, pages)
	for p := range want {
		want[p] = dirty.HashPage(host[p*pageBytes : (p+1)*pageBytes])
	}
	hh, err := g.NewHostHasher(host)
	if err != nil {
		t.Fatal(err)
	}
	defer hh.Close()
	checkHasher(t, hh, want)
	dev := g.ops.(*modelDevice).add(host)
	dh, err := g.NewHasher(dev, pages)
	if err != nil {
		t.Fatal(err)
	}
	defer dh.Close()
	checkHasher(t, dh, want)
}

// TestPieceLayout checks that nvPiece is kernels.cu's struct piece: three
// u64s, 24 bytes, no padding.
func TestPieceLayout(t *testing.T) {
	var p nvPiece
	if unsafe.Sizeof(p) != 24 || unsafe.Offsetof(p.dst) != 8 || unsafe.Offsetof(p.len) != 16 {
		t.Fatalf("nvPiece is %d bytes (dst at %d, len at %d), want 24 (8, 16)", unsafe.Sizeof(p), unsafe.Offsetof(p.dst), unsafe.Offsetof(p.len))
	}
}
