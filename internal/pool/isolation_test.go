package pool

import (
	"bytes"
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/gmig-dev/gmig/internal/memprobe"
)

// Isolation (docs/device-abi.md §1.1): a partition's memfd, the descriptor
// a client gets, reaches that partition's bytes and nothing else, and a
// freed partition's memfd is never behind a later one.

// clientFD is what a client holds after SCM_RIGHTS: its own descriptor for
// pt's memfd, which outlives the pool's.
func clientFD(t *testing.T, p *Pool, pt Partition) *os.File {
	t.Helper()
	f, err := p.File(pt)
	if err != nil {
		t.Fatalf("File(%v): %v", pt, err)
	}
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	c := os.NewFile(uintptr(fd), "client")
	t.Cleanup(func() { c.Close() })
	return c
}

// clientMap maps n bytes of f at offset off as a client would, or returns
// nil if the kernel refuses.
func clientMap(t *testing.T, f *os.File, off int64, n int) []byte {
	t.Helper()
	m, err := unix.Mmap(int(f.Fd()), off, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil
	}
	t.Cleanup(func() { unix.Munmap(m) })
	return m
}

// TestFileReachesOnlyItsPartition gives a client partition a's memfd and
// lets it try every way out: mapping the whole pool's length from offset
// 0, mapping at b's pool offset, reading and writing past the end with
// pread/pwrite, changing its size or allocating past its end. None of it reaches b, and the size
// never changes.
func TestFileReachesOnlyItsPartition(t *testing.T) {
	p := newPool(t, 64*PageSize)
	a, err := p.AllocAt(8*PageSize, 8*PageSize) // not at 0: an old-style offset exists
	if err != nil {
		t.Fatal(err)
	}
	b := mustAlloc(t, p, 16*PageSize)
	fill(p.Slice(a), 0xaa)
	fill(p.Slice(b), 0xbb)
	f := clientFD(t, p, a)

	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || uint64(st.Size) != a.Size {
		t.Fatalf("fstat: size %d, %v; want %d", st.Size, err, a.Size)
	}
	if seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0); err != nil || seals != partitionSeals {
		t.Errorf("seals %#x, %v; want %#x", seals, err, partitionSeals)
	}
	for _, size := range []int64{0, int64(a.Size) - PageSize, int64(a.Size) + PageSize, int64(p.Size())} {
		if err := unix.Ftruncate(int(f.Fd()), size); !errors.Is(err, unix.EPERM) {
			t.Errorf("ftruncate to %d = %v, want EPERM", size, err)
		}
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_WRITE); !errors.Is(err, unix.EPERM) {
		t.Errorf("adding a seal = %v, want EPERM", err)
	}
	for _, mode := range []uint32{0, unix.FALLOC_FL_KEEP_SIZE} {
		if err := unix.Fallocate(int(f.Fd()), mode, int64(a.Size), PageSize); !errors.Is(err, unix.EPERM) {
			t.Errorf("fallocate (mode %#x) past the end = %v, want EPERM", mode, err)
		}
	}
	if n, err := f.WriteAt([]byte{1}, int64(a.Size)); n != 0 || err == nil {
		t.Errorf("pwrite past the end: %d bytes, %v", n, err)
	}
	buf := make([]byte, PageSize)
	if n, _ := f.ReadAt(buf, int64(b.Offset)); n != 0 {
		t.Errorf("pread at b's pool offset returned %d bytes", n)
	}

	// The whole pool's length from offset 0: a's bytes, then faults.
	whole := clientMap(t, f, 0, int(p.Size()))
	if whole == nil {
		t.Fatal("mapping the pool's length from 0 was refused; the test needs it to probe past the end")
	}
	if !bytes.Equal(whole[:a.Size], p.Slice(a)) {
		t.Fatal("the client's mapping does not show its own partition")
	}
	faults, seen := memprobe.LoadAll(whole[a.Size:], PageSize)
	if len(seen) != 0 {
		t.Errorf("past the end of its memfd the client read %d pages (%d faulted)", len(seen), faults)
	}
	if faults, landed := memprobe.StoreAll(whole[a.Size:], PageSize, 0xee); landed != 0 {
		t.Errorf("past the end of its memfd %d client stores landed (%d faulted)", landed, faults)
	}
	// At b's pool offset, as the shared pool memfd would have allowed.
	if at := clientMap(t, f, int64(b.Offset), int(b.Size)); at != nil {
		if _, seen := memprobe.LoadAll(at, PageSize); len(seen) != 0 {
			t.Errorf("a mapping at b's offset read %d pages", len(seen))
		}
		memprobe.StoreAll(at, PageSize, 0xee)
	}
	if !bytes.Equal(p.Slice(b), bytes.Repeat([]byte{0xbb}, int(b.Size))) {
		t.Error("b changed under a's client")
	}
	if err := unix.Fstat(int(f.Fd()), &st); err != nil || uint64(st.Size) != a.Size {
		t.Errorf("after the attempts: size %d, %v; want %d", st.Size, err, a.Size)
	}
}

// TestFreedMemfdNeverReused frees a partition while its client still maps
// it, and places a new one at the same offset: the client keeps its old
// pages, sees none of the new tenant's bytes and cannot write into them;
// gmigd's range for the freed partition faults until it is reused.
func TestFreedMemfdNeverReused(t *testing.T) {
	p := newPool(t, 16*PageSize)
	a, err := p.AllocAt(4*PageSize, 4*PageSize)
	if err != nil {
		t.Fatal(err)
	}
	old := clientFD(t, p, a)
	oldMap := clientMap(t, old, 0, int(a.Size))
	if oldMap == nil {
		t.Fatal("client mmap refused")
	}
	fill(oldMap, 0xaa)
	if err := p.Free(a); err != nil {
		t.Fatal(err)
	}
	if _, ok := memprobe.Load(p.Mem(), int(a.Offset)); ok {
		t.Error("the freed range is still mapped in the pool")
	}
	if _, err := p.File(a); !errors.Is(err, ErrNotFound) {
		t.Errorf("File of a freed partition = %v, want ErrNotFound", err)
	}

	c, err := p.AllocAt(a.Offset, a.Size)
	if err != nil {
		t.Fatal(err)
	}
	if !allZero(p.Slice(c)) {
		t.Fatal("the new tenant starts with the old tenant's bytes")
	}
	fill(p.Slice(c), 0xcc)
	if !bytes.Equal(oldMap, bytes.Repeat([]byte{0xaa}, int(a.Size))) {
		t.Error("the old client's mapping changed when the new tenant wrote")
	}
	fill(oldMap, 0xdd)
	if !bytes.Equal(p.Slice(c), bytes.Repeat([]byte{0xcc}, int(c.Size))) {
		t.Error("the old client's writes reached the new tenant")
	}
	cf, err := p.File(c)
	if err != nil {
		t.Fatal(err)
	}
	var so, sc unix.Stat_t
	if unix.Fstat(int(old.Fd()), &so) != nil || unix.Fstat(int(cf.Fd()), &sc) != nil || so.Ino == sc.Ino {
		t.Errorf("the new partition's memfd is the old one (inode %d)", sc.Ino)
	}
}
