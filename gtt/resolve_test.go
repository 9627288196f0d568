package gtt

import (
	"errors"
	"slices"
	"testing"
)

// resolveTable maps, at base 0x100 pages over 16 pages of graphics memory:
//
//	GA page 0,1,2 -> pages 4,5,6 (rw, contiguous)
//	GA page 3     -> page 10 (rw, a jump)
//	GA page 4     -> page 11 (ro, contiguous with page 3's backing)
//	GA page 5     -> unmapped
//	GA page 6,7   -> page 2, page 2 (aliases, rw)
//	GA page 8     -> page 3 (rw; follows page 2)
//	GA page 9     -> page 15 (rw, last entry)
func resolveTable(t testing.TB) *Table {
	tb := newTable(t, 10, 0x100*pg, 16)
	for i, e := range []uint64{
		ent(4, V|W), ent(5, V|W), ent(6, V|W), ent(10, V|W), ent(11, V),
		0, ent(2, V|W), ent(2, V|W), ent(3, V|W), ent(15, V|W),
	} {
		mustWrite(t, tb, uint32(i), e)
	}
	return tb
}

func host(page uint64) uint64 { return (0x100 + page) * pg }

func TestResolve(t *testing.T) {
	tb := resolveTable(t)
	for _, tc := range []struct {
		name  string
		ga, n uint64
		write bool
		want  []Extent
	}{
		{"one byte", 1, 1, false, []Extent{{host(4) + 1, 1}}},
		{"within a page", 2*pg + 100, 200, true, []Extent{{host(6) + 100, 200}}},
		{"contiguous pages merge", 0, 3 * pg, true, []Extent{{host(4), 3 * pg}}},
		{"unaligned across merge", 100, 2 * pg, true, []Extent{{host(4) + 100, 2 * pg}}},
		{"jump splits", 2*pg + 10, pg, true, []Extent{{host(6) + 10, pg - 10}, {host(10), 10}}},
		{"ro page readable, merges", 3 * pg, 2 * pg, false, []Extent{{host(10), 2 * pg}}},
		{"aliases do not merge", 6 * pg, 2 * pg, true, []Extent{{host(2), pg}, {host(2), pg}}},
		{"alias then next page merges", 7*pg + 8, pg, false, []Extent{{host(2) + 8, pg}}},
		{"alias run", 6*pg + pg/2, 2 * pg, true, []Extent{{host(2) + pg/2, pg / 2}, {host(2), pg + pg/2}}},
		{"last byte of the space", 10*pg - 1, 1, true, []Extent{{host(15) + pg - 1, 1}}},
		{"zero length", 5 * pg, 0, true, nil},
		{"zero length beyond", 1 << 40, 0, true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			xs, err := tb.Resolve(tc.ga, tc.n, tc.write)
			if err != nil {
				t.Fatalf("Resolve(%#x, %#x, %v): %v", tc.ga, tc.n, tc.write, err)
			}
			if !slices.Equal(xs, tc.want) {
				t.Errorf("Resolve(%#x, %#x) = %x, want %x", tc.ga, tc.n, xs, tc.want)
			}
			if TotalLen(xs) != tc.n {
				t.Errorf("TotalLen = %d, want %d", TotalLen(xs), tc.n)
			}
			if cap(xs) != len(xs) {
				t.Errorf("result not sized exactly: len %d cap %d", len(xs), cap(xs))
			}
		})
	}
}

func TestResolveFaults(t *testing.T) {
	tb := resolveTable(t)
	const space = 10 * pg
	for _, tc := range []struct {
		name   string
		ga, n  uint64
		write  bool
		wantGA uint64
		reason string
	}{
		{"unmapped page", 5*pg + 3, 1, false, 5*pg + 3, "not mapped"},
		{"run into unmapped", 3 * pg, 3 * pg, false, 5 * pg, "not mapped"},
		{"write to read-only", 4*pg + 8, 8, true, 4*pg + 8, "read-only"},
		{"write runs into read-only", 3*pg + 1, pg, true, 4 * pg, "read-only"},
		{"start beyond space", space, 1, false, space, "beyond the address space"},
		{"start far beyond", 1 << 50, 1, false, 1 << 50, "beyond the address space"},
		{"runs off the end", space - 8, 16, false, space, "beyond the address space"},
		{"overflow", 8 * pg, ^uint64(0), false, space, "beyond the address space"},
		{"overflow from beyond", ^uint64(0) - 1, 8, false, ^uint64(0) - 1, "beyond the address space"},
		{"fault before the end", 4 * pg, ^uint64(0) - 2, false, 5 * pg, "not mapped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			xs, err := tb.Resolve(tc.ga, tc.n, tc.write)
			if !errors.Is(err, ErrFault) {
				t.Fatalf("Resolve(%#x, %#x, %v) = %v, %v; want ErrFault", tc.ga, tc.n, tc.write, xs, err)
			}
			var fe *FaultError
			if !errors.As(err, &fe) {
				t.Fatalf("error %T is not a *FaultError", err)
			}
			if fe.GA != tc.wantGA || fe.Reason != tc.reason || fe.Write != tc.write {
				t.Errorf("fault %+v, want GA %#x (%s)", *fe, tc.wantGA, tc.reason)
			}
			if xs != nil {
				t.Errorf("extents %v returned with an error", xs)
			}
		})
	}
}

func TestAppendResolveReusesBuffer(t *testing.T) {
	tb := resolveTable(t)
	buf := make([]Extent, 1, 8)
	buf[0] = Extent{host(5), pg} // adjacent to the result: must not merge into it
	xs, err := tb.AppendResolve(buf, pg, pg, true)
	if err != nil {
		t.Fatal(err)
	}
	if want := []Extent{{host(5), pg}, {host(5), pg}}; !slices.Equal(xs, want) {
		t.Errorf("AppendResolve = %x, want %x", xs, want)
	}
	if &xs[0] != &buf[0] {
		t.Error("AppendResolve reallocated a buffer with room")
	}
	if got, err := tb.AppendResolve(buf[:1], 5*pg, 1, false); err == nil || len(got) != 1 {
		t.Errorf("failed AppendResolve = %v, %v; want dst unchanged", got, err)
	}
}

func TestResolveAllocations(t *testing.T) {
	tb := resolveTable(t)
	if n := testing.AllocsPerRun(100, func() {
		if _, err := tb.Resolve(0, 5*pg, false); err != nil {
			t.Fatal(err)
		}
	}); n != 1 {
		t.Errorf("Resolve allocates %v times, want 1", n)
	}
	buf := make([]Extent, 0, 16)
	if n := testing.AllocsPerRun(100, func() { tb.AppendResolve(buf[:0], 0, 5*pg, false) }); n != 0 {
		t.Errorf("AppendResolve with room allocates %v times, want 0", n)
	}
}

func BenchmarkResolve(b *testing.B) {
	tb := newTable(b, 65536, 0, 65536)
	for i := range uint32(65536) {
		mustWrite(b, tb, i, ent(uint64(i^1), V|W)) // pairs swapped: no merging
	}
	buf := make([]Extent, 0, 64)
	b.SetBytes(64 * pg)
	for b.Loop() {
		buf, _ = tb.AppendResolve(buf[:0], 100*pg, 64*pg, true)
	}
}
