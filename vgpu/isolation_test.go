package vgpu

import (
	"bytes"
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/internal/memprobe"
	"github.com/gmig-dev/gmig/vfio"
)

// Isolation (docs/device-abi.md §1.1), seen from a vfio-user client: the
// aperture descriptor the server passes reaches its vGPU's memory and
// nothing else, before and after the vGPU is destroyed.

// serveOnce serves v on a fresh socket and returns a connected client;
// stop ends the server (the client is then closed too) and is also run at
// cleanup.
func serveOnce(t *testing.T, v *VGPU) (c *vfio.Client, stop func()) {
	t.Helper()
	path := filepath.Join(t.TempDir(), v.Name()+".sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- v.Serve(ctx, l) }()
	if c, err = vfio.Dial(path); err != nil {
		cancel()
		<-done
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if stopped {
			return
		}
		stopped = true
		c.Close()
		cancel()
		<-done
		l.Close()
	}
	t.Cleanup(stop)
	return c, stop
}

// aperture asks the server for the aperture region as QEMU does and
// returns it with the descriptor the server passed (closed at cleanup). It
// must be the vGPU's own memory at offset 0.
func aperture(t *testing.T, c *vfio.Client, memSize uint64) vfio.RegionInfo {
	t.Helper()
	ri, err := c.RegionInfo(abi.BARAperture)
	if err != nil {
		t.Fatal(err)
	}
	if ri.File == nil {
		t.Fatal("no aperture descriptor")
	}
	t.Cleanup(func() { ri.File.Close() })
	if ri.Offset != 0 || ri.Size != memSize {
		t.Errorf("aperture region at offset %#x, %#x bytes; want 0, %#x", ri.Offset, ri.Size, memSize)
	}
	return ri
}

// clientMap maps n bytes of f at off, or returns nil if the kernel refuses.
func clientMap(t *testing.T, f *os.File, off int64, n int) []byte {
	t.Helper()
	m, err := unix.Mmap(int(f.Fd()), off, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil
	}
	t.Cleanup(func() { unix.Munmap(m) })
	return m
}

// TestApertureReachesOnlyItsVGPU takes vGPU a's aperture descriptor as the
// client receives it and tries to reach vGPU b through it: fstat shows a's
// size alone, mappings past the end fault (at b's pool offset too), the
// size cannot be changed, and b's bytes are never seen or changed.
func TestApertureReachesOnlyItsVGPU(t *testing.T) {
	p := newPool(t, 16<<20)
	a := newVGPU(t, p, "a", 2<<20)
	b := newVGPU(t, p, "b", 4<<20)
	pattern := bytes.Repeat([]byte{0xbb}, int(b.Config().MemSize))
	copy(b.Memory(), pattern)
	copy(a.Memory(), bytes.Repeat([]byte{0xaa}, int(a.Config().MemSize)))

	c, _ := serveOnce(t, a)
	f := aperture(t, c, a.Config().MemSize).File
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || uint64(st.Size) != a.Config().MemSize {
		t.Errorf("fstat of the aperture: size %d, %v; want a's %d", st.Size, err, a.Config().MemSize)
	}
	if err := unix.Ftruncate(int(f.Fd()), 0); !errors.Is(err, unix.EPERM) {
		t.Errorf("ftruncate of the aperture = %v, want EPERM (sealed)", err)
	}
	if err := unix.Ftruncate(int(f.Fd()), int64(p.Size())); !errors.Is(err, unix.EPERM) {
		t.Errorf("growing the aperture = %v, want EPERM (sealed)", err)
	}

	// Past the end, over the pool's whole length, and at b's pool offset.
	mem := int(a.Config().MemSize)
	for _, m := range []struct {
		name string
		off  int64
		n    int
		skip int // bytes of a's own aperture at the start
	}{
		{"pool length from 0", 0, int(p.Size()), mem},
		{"past the end", int64(mem), mem, 0},
		{"at b's pool offset", int64(b.Partition().Offset), int(b.Config().MemSize), 0},
	} {
		got := clientMap(t, f, m.off, m.n)
		if got == nil {
			continue // refused: nothing reached
		}
		if _, seen := memprobe.LoadAll(got[m.skip:], abi.PageSize); len(seen) != 0 {
			t.Errorf("%s: %d pages readable beyond a's aperture", m.name, len(seen))
		}
		if _, landed := memprobe.StoreAll(got[m.skip:], abi.PageSize, 0xee); landed != 0 {
			t.Errorf("%s: %d stores landed beyond a's aperture", m.name, landed)
		}
		if m.skip > 0 && !bytes.Equal(got[:m.skip], a.Memory()) {
			t.Errorf("%s: the mapping does not start with a's memory", m.name)
		}
	}
	// The trapped path refuses what lies past the aperture, too.
	if err := c.WriteRegion(abi.BARAperture, a.Config().MemSize, []byte{0xee}); err == nil {
		t.Error("a region write past the aperture was accepted")
	}
	if !bytes.Equal(b.Memory(), pattern) {
		t.Error("vGPU b's memory changed under a's client")
	}
}

// TestDestroyedClientNeverReachesSuccessor keeps vGPU a's client mapping
// after a is destroyed and creates c in the same partition: c starts at
// zero, the old mapping never shows c's bytes, and its writes never reach
// c; a's trapped aperture accesses and region info fail.
func TestDestroyedClientNeverReachesSuccessor(t *testing.T) {
	p := newPool(t, 8<<20)
	_ = newVGPU(t, p, "pad", 1<<20) // a is not at offset 0
	a, err := New(Config{Name: "a", MemSize: 2 << 20, GTTEntries: 1024}, p, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	part := a.Partition()
	cl, stop := serveOnce(t, a)
	ri := aperture(t, cl, 2<<20)
	old := clientMap(t, ri.File, int64(ri.Offset), 2<<20) // where the region says it is
	if old == nil {
		t.Fatal("client mmap of the aperture refused")
	}
	copy(old, bytes.Repeat([]byte{0xaa}, len(old)))
	if !bytes.Equal(a.Memory(), old) {
		t.Fatal("the client's aperture is not a's memory")
	}
	stop()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}

	c := newVGPU(t, p, "c", 2<<20) // first fit: a's partition
	if c.Partition() != part {
		t.Fatalf("c at %v, the test needs a's partition %v", c.Partition(), part)
	}
	if !bytes.Equal(c.Memory(), make([]byte, len(old))) {
		t.Fatal("c starts with bytes it did not write")
	}
	copy(c.Memory(), bytes.Repeat([]byte{0xcc}, len(old)))
	if i := bytes.IndexByte(old, 0xcc); i >= 0 {
		t.Errorf("a's old mapping shows c's bytes at %#x", i)
	}
	copy(old, bytes.Repeat([]byte{0xdd}, len(old)))
	if i := bytes.IndexByte(c.Memory(), 0xdd); i >= 0 {
		t.Errorf("a write through a's old mapping reached c at %#x", i)
	}
	// A client still connected to a closed vGPU gets errors, not c.
	if _, err := a.RegionInfo(abi.BARAperture); err == nil {
		t.Error("a closed vGPU still hands out its aperture")
	}
	if err := a.WriteRegion(abi.BARAperture, 0, []byte{0xdd}); !errors.Is(err, ErrClosed) {
		t.Errorf("trapped aperture write to a closed vGPU = %v, want ErrClosed", err)
	}
	if err := a.ReadRegion(abi.BARAperture, 0, make([]byte, 8)); !errors.Is(err, ErrClosed) {
		t.Errorf("trapped aperture read of a closed vGPU = %v, want ErrClosed", err)
	}
	if c.Memory()[0] != 0xcc {
		t.Error("a trapped write to the closed vGPU reached c")
	}
}

// TestCloseDuringApertureAccess closes a vGPU while trapped aperture
// accesses run: each one either completes or fails with ErrClosed, none
// touches unmapped memory (which would kill the test binary), and after
// Close all of them fail.
func TestCloseDuringApertureAccess(t *testing.T) {
	p := newPool(t, 4<<20)
	v, err := New(Config{Name: "v", MemSize: 1 << 20, GTTEntries: 1024}, p, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	started, done := make(chan struct{}), make(chan error, 1)
	go func() {
		buf := make([]byte, 64<<10)
		for i := 0; ; i++ {
			err := v.WriteRegion(abi.BARAperture, uint64(i%16)*uint64(len(buf)), buf)
			if err == nil {
				err = v.ReadRegion(abi.BARAperture, uint64(i%16)*uint64(len(buf)), buf)
			}
			if i == 0 {
				close(started)
			}
			if err != nil {
				done <- err
				return
			}
		}
	}()
	<-started
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, ErrClosed) {
		t.Fatalf("aperture access during Close = %v, want ErrClosed", err)
	}
}
