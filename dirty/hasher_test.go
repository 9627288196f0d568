package dirty

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestScanWithHasher checks that a scan whose full hashes come from a
// PageHasher (two, splitting the pages) finds exactly what the tracker's own workers find, by the same
// sources.
func TestScanWithHasher(t *testing.T) {
	const pages = 300
	mem := make([]byte, pages*PageSize)
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range mem {
		mem[i] = byte(rng.Uint32())
	}
	h, err := NewCPUHasher(mem, 3)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := New(mem, Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	h2, err := NewCPUHasher(mem, 1)
	if err != nil {
		t.Fatal(err)
	}
	hashed, err := New(mem, Options{Workers: 2, Hasher: SplitHasher(h, h2, 0.4, pages)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, tr := range []*Tracker{plain, hashed} {
		tr.offsets = []int{0, 2048} // the same samples in both
		if err := tr.RecordAll(ctx); err != nil {
			t.Fatal(err)
		}
	}
	// Change pages: a sampled word (Sample), a byte elsewhere (Hash), and
	// mark some as engine writes.
	mem[5*PageSize] ^= 1
	mem[9*PageSize+100] ^= 1
	mem[299*PageSize+4095] ^= 0x80
	for _, tr := range []*Tracker{plain, hashed} {
		tr.MarkWritten(42*PageSize, 3*PageSize)
	}
	a, err := plain.ScanFrozen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b, err := hashed.ScanFrozen(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(a.Dirty, b.Dirty) || a.BySource != b.BySource || a.PagesHashed != b.PagesHashed {
		t.Fatalf("with hasher %v %v (%d hashed), without %v %v (%d hashed)", b.Dirty, b.BySource, b.PagesHashed, a.Dirty, a.BySource, a.PagesHashed)
	}
	if want := []int{5, 9, 42, 43, 44, 299}; !slices.Equal(a.Dirty, want) {
		t.Fatalf("dirty %v, want %v", a.Dirty, want)
	}
}
