package sim

import (
	"context"
	"net"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/guest"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/vgpu"
)

// device is one vGPU served on a socket for the duration of a test.
type device struct {
	v    *vgpu.VGPU
	path string
}

func newPool(t *testing.T, size uint64) *pool.Pool {
	t.Helper()
	p, err := pool.New(size)
	if err != nil {
		t.Fatalf("pool.New: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// serve creates a vGPU of memSize in p and serves it until the test ends.
func serve(t *testing.T, p *pool.Pool, name string, memSize uint64) *device {
	t.Helper()
	v, err := vgpu.New(vgpu.Config{Name: name, MemSize: memSize}, p, zerolog.Nop())
	if err != nil {
		t.Fatalf("vgpu.New: %v", err)
	}
	return serveVGPU(t, v)
}

// serveVGPU serves v on a socket of its own until the test ends, then
// closes it.
func serveVGPU(t *testing.T, v *vgpu.VGPU) *device {
	t.Helper()
	path := filepath.Join(t.TempDir(), v.Name()+".sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatalf("listen: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- v.Serve(ctx, l) }()
	t.Cleanup(func() {
		cancel()
		<-done
		l.Close()
		v.Close()
	})
	return &device{v: v, path: path}
}

func attach(t *testing.T, d *device, opts Options) *Bus {
	t.Helper()
	b, err := Attach(d.path, opts)
	if err != nil {
		t.Fatalf("Attach: %v", err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func open(t *testing.T, b guest.Bus, opts guest.Options) *guest.Driver {
	t.Helper()
	d, err := guest.Open(b, opts)
	if err != nil {
		t.Fatalf("guest.Open: %v", err)
	}
	return d
}
