//go:build cuda

package nvidia

// GPU tests of the page hasher: built only with -tags cuda, and each
// skips, saying why, where libcuda.so.1 or a GPU is absent. GMIG_CUDA_PTX
// names a freshly built kernels.ptx to use instead of the embedded one.
// The checks themselves are shared with the device model (shared_test.go);
// the back end's own GPU tests are the engine's (engine's
// nvidia_cuda_test.go).

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/internal/cuda"
)

func TestMain(m *testing.M) {
	if err := KernelsFromEnv(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// testGPU returns GPU 0 or skips the test saying why there is none.
func testGPU(t testing.TB) *GPU {
	t.Helper()
	g, err := OpenGPU(0)
	if errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNoDevice) {
		t.Skipf("no NVIDIA GPU here: %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return g
}

// sharedMem maps n bytes shared and anonymous: memory like a pool memfd's.
func sharedMem(t testing.TB, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

// TestGPUHashMatchesXXHash checks the GPU's page hash against the
// tracker's xxhash64, over device memory and over registered host memory,
// for every page and for a page list.
func TestGPUHashMatchesXXHash(t *testing.T) {
	g := testGPU(t)
	const pages = 1000
	host := sharedMem(t, pages*abi.PageSize)
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range host {
		host[i] = byte(rng.Uint32())
	}
	clear(host[7*abi.PageSize : 8*abi.PageSize]) // a zero page
	want := make([]uint64, pages)
	for p := range want {
		want[p] = dirty.HashPage(host[p*abi.PageSize : (p+1)*abi.PageSize])
	}
	_, err := g.ops.HostRegister(host)
	if err != nil {
		t.Fatal(err)
	}
	defer g.ops.HostUnregister(host)
	devMem, err := g.ops.Alloc(pages * abi.PageSize)
	if err != nil {
		t.Fatal(err)
	}
	defer g.ops.Free(devMem)
	s, _ := g.ops.NewStream()
	if err := g.ops.CopyHtoD(devMem, host, s); err != nil {
		t.Fatal(err)
	}
	if err := g.ops.Sync(s); err != nil {
		t.Fatal(err)
	}
	dh, err := g.NewHasher(devMem, pages)
	if err != nil {
		t.Fatal(err)
	}
	defer dh.Close()
	hh, err := g.NewHostHasher(host)
	if err != nil {
		t.Fatal(err)
	}
	defer hh.Close()
	checkHasher(t, dh, want)
	checkHasher(t, hh, want)
}
