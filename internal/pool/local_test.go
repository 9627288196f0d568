package pool

import (
	"bytes"
	"errors"
	"testing"

	"github.com/gmig-dev/gmig/internal/memprobe"
)

// TestLocalMemoryInNoFile: a partition's device-local memory follows its
// graphics memory in the pool, starts as zeros, and is in no file: the
// client's memfd is exactly the graphics memory, so writes to local memory
// never show through it at any offset, nor its bytes once the partition is
// freed and re-allocated.
func TestLocalMemoryInNoFile(t *testing.T) {
	p := newPool(t, 32*PageSize)
	a, err := p.AllocLocal(4*PageSize, 8*PageSize)
	if err != nil {
		t.Fatal(err)
	}
	if a.End() != a.Offset+12*PageSize || a.ApertureEnd() != a.Offset+4*PageSize || a.LocalPages() != 8 {
		t.Fatalf("partition %+v: End %#x, ApertureEnd %#x", a, a.End(), a.ApertureEnd())
	}
	loc := p.LocalSlice(a)
	if len(loc) != 8*PageSize || !allZero(loc) {
		t.Fatalf("local slice: %d bytes, zero %v", len(loc), allZero(loc))
	}
	if &loc[0] != &p.Mem()[a.ApertureEnd()] || len(p.Slice(a)) != 4*PageSize {
		t.Fatal("local memory is not right after the graphics memory")
	}
	fill(p.Slice(a), 0xaa)
	fill(loc, 0x5c)

	f := clientFD(t, p, a)
	st, err := f.Stat()
	if err != nil || st.Size() != 4*PageSize {
		t.Fatalf("memfd size %d, %v; want exactly the graphics memory", st.Size(), err)
	}
	if m := clientMap(t, f, 0, 4*PageSize); m == nil || bytes.IndexByte(m, 0x5c) >= 0 {
		t.Fatal("the client's mapping shows local bytes (or could not be made)")
	}
	buf := make([]byte, PageSize)
	if n, _ := f.ReadAt(buf, 4*PageSize); n != 0 {
		t.Errorf("read %d bytes past the graphics memory through the memfd", n)
	}

	if err := p.Free(a); err != nil {
		t.Fatal(err)
	}
	if _, ok := memprobe.Load(p.Mem(), int(a.ApertureEnd())); ok {
		t.Error("freed local memory is still mapped")
	}
	b, err := p.AllocLocal(4*PageSize, 8*PageSize)
	if err != nil || b != a {
		t.Fatalf("re-allocation %+v, %v; want the same place %+v", b, err, a)
	}
	if !allZero(p.LocalSlice(b)) {
		t.Error("a re-allocated partition's local memory holds the old tenant's bytes")
	}
	if _, err := p.AllocLocal(PageSize, 100); !errors.Is(err, ErrSize) {
		t.Errorf("local size not a page multiple: %v, want ErrSize", err)
	}
	if _, err := p.AllocLocal(PageSize, 32*PageSize); !errors.Is(err, ErrNoSpace) {
		t.Errorf("too large: %v, want ErrNoSpace", err)
	}
}
