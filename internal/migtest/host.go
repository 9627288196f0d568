package migtest

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"path/filepath"
	"sync"
	"testing"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/engine"
	"github.com/gmig-dev/gmig/internal/pool"
	"github.com/gmig-dev/gmig/vfio"
	"github.com/gmig-dev/gmig/vgpu"
)

// Log is the logger tests give the code under test: quiet unless a test is
// debugged.
var Log = zerolog.Nop()

// NewPool returns a pool of size bytes, closed at the end of the test.
func NewPool(t testing.TB, size uint64) *pool.Pool {
	t.Helper()
	p, err := pool.New(size)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// NewVGPU creates a vGPU of mem bytes in p, closed at the end of the test.
func NewVGPU(t testing.TB, p *pool.Pool, name string, mem uint64) *vgpu.VGPU {
	t.Helper()
	return NewVGPUConfig(t, p, vgpu.Config{Name: name, MemSize: mem})
}

// Quiesced reports whether v's engine is quiesced (Save needs it).
func Quiesced(t testing.TB, v *vgpu.VGPU) bool {
	t.Helper()
	_, err := v.Save()
	if err != nil && !errors.Is(err, engine.ErrNotQuiesced) {
		t.Fatal(err)
	}
	return err == nil
}

// TCPPair returns the two ends of a loopback TCP connection.
func TCPPair(t testing.TB) (a, b net.Conn) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := l.Accept()
		ch <- res{c, err}
	}()
	a, err = net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	r := <-ch
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { a.Close(); r.c.Close() })
	return a, r.c
}

// PipePair returns the two ends of a net.Pipe.
func PipePair(t testing.TB) (a, b net.Conn) {
	a, b = net.Pipe()
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// Corrupt returns a copy of p with the byte at p[i] flipped.
func Corrupt(p []byte, i int) []byte {
	q := append([]byte(nil), p...)
	q[i] ^= 0x5a
	return q
}

// Device is what a vGPU is served as: the vGPU itself, or a device built
// around it (vgpu.ServeDevice), closed with it.
type Device interface {
	vfio.Device
	Close() error
}

// Served is a vGPU on a vfio-user socket, as a gmigd serves it.
type Served struct {
	V    *vgpu.VGPU
	Path string // the socket

	dev    Device
	cancel context.CancelFunc
	done   chan error
	l      *net.UnixListener
	once   sync.Once
}

// ServeNew creates a vGPU of mem bytes in p and serves it.
func ServeNew(t testing.TB, p *pool.Pool, name string, mem uint64) *Served {
	t.Helper()
	v, err := vgpu.New(vgpu.Config{Name: name, MemSize: mem}, p, Log)
	if err != nil {
		t.Fatal(err)
	}
	return Serve(t, v)
}

// Serve serves v until Close (or the end of the test), then closes v.
func Serve(t testing.TB, v *vgpu.VGPU) *Served { return ServeDevice(t, v, v) }

// ServeDevice serves dev, built around v, until Close (or the end of the
// test), then closes dev.
func ServeDevice(t testing.TB, v *vgpu.VGPU, dev Device) *Served {
	t.Helper()
	path := filepath.Join(t.TempDir(), v.Name()+".sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		dev.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Served{V: v, Path: path, dev: dev, cancel: cancel, done: make(chan error, 1), l: l}
	go func() { s.done <- v.ServeDevice(ctx, l, dev) }()
	t.Cleanup(s.Close)
	return s
}

// Close stops serving and closes the device. It is idempotent.
func (s *Served) Close() {
	s.once.Do(func() {
		s.cancel()
		<-s.done
		s.l.Close()
		s.dev.Close()
	})
}

// RandomPair returns a source vGPU of mem bytes whose every page holds
// random bytes (each page differs, so a scan hashes and a stop phase sends
// all of them) and an empty destination of the same size, each in a pool
// of its own: the stop-phase benchmarks' pair.
func RandomPair(t testing.TB, mem uint64) (src, dst *vgpu.VGPU) {
	t.Helper()
	pa, pb := NewPool(t, mem+(1<<20)), NewPool(t, mem+(1<<20))
	src = NewVGPU(t, pa, "src", mem)
	rng := rand.New(rand.NewPCG(1, 2))
	m := src.Memory()
	for i := 0; i < len(m); i += 8 {
		m[i] = byte(rng.Uint32())
	}
	return src, NewVGPU(t, pb, "dst", mem)
}
