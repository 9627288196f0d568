package nvidia

import (
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/internal/cuda"
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

// TestModelGPUs checks that GMIG_CUDA_MODEL=N presents N GPUs, each its
// own device with its own UUID, found by UUID, and no GPU N.
func TestModelGPUs(t *testing.T) {
	t.Setenv(ModelEnv, "3")
	devs, err := Devices()
	if err != nil || len(devs) != 3 {
		t.Fatalf("Devices = %v, %v; want 3 model GPUs", devs, err)
	}
	seen := map[string]bool{}
	for i, d := range devs {
		if d.Ordinal != i || seen[d.UUID] || !strings.HasPrefix(d.UUID, "GPU-") {
			t.Fatalf("GPU %d: %+v (UUIDs so far %v)", i, d, seen)
		}
		seen[d.UUID] = true
		if o, ok := FindUUID(devs, strings.ToUpper(d.UUID)); !ok || o != i {
			t.Fatalf("FindUUID(%s) = %d, %v; want %d", d.UUID, o, ok, i)
		}
		g, err := OpenGPU(i)
		if err != nil {
			t.Fatal(err)
		}
		if g.Info().UUID != d.UUID {
			t.Fatalf("OpenGPU(%d) is %s, want %s", i, g.Info().UUID, d.UUID)
		}
	}
	g0, _ := OpenGPU(0)
	g1, _ := OpenGPU(1)
	if g0 == g1 || g0.ops == g1.ops {
		t.Fatal("model GPUs 0 and 1 share a device")
	}
	if _, ok := FindUUID(devs, ModelUUID(3)); ok {
		t.Fatal("FindUUID found a fourth GPU")
	}
	if _, err := OpenGPU(3); !errors.Is(err, cuda.ErrNoDevice) {
		t.Fatalf("OpenGPU(3) of 3 = %v, want ErrNoDevice", err)
	}
	t.Setenv(ModelEnv, "many")
	if _, err := Devices(); err == nil || !strings.Contains(err.Error(), ModelEnv) {
		t.Fatalf("Devices with %s=many: %v, want an error naming it", ModelEnv, err)
	}
}
