package dirty

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/cespare/xxhash/v2"
)

func newTracker(tb testing.TB, mem []byte, opts Options) *Tracker {
	tb.Helper()
	tr, err := New(mem, opts)
	if err != nil {
		tb.Fatal(err)
	}
	return tr
}

func scan(tb testing.TB, tr *Tracker) ScanResult {
	tb.Helper()
	r, err := tr.Scan(context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	sum := 0
	for _, n := range r.BySource {
		sum += n
	}
	if sum != len(r.Dirty) {
		tb.Fatalf("BySource %v sums to %d, %d pages dirty", r.BySource, sum, len(r.Dirty))
	}
	if !slices.IsSorted(r.Dirty) || len(slices.Compact(slices.Clone(r.Dirty))) != len(r.Dirty) {
		tb.Fatalf("Dirty not strictly ascending: %v", r.Dirty)
	}
	if r.BytesHashed != uint64(r.PagesHashed)*PageSize {
		tb.Fatalf("BytesHashed %d for %d pages", r.BytesHashed, r.PagesHashed)
	}
	return r
}

func recordAll(tb testing.TB, tr *Tracker) {
	tb.Helper()
	if err := tr.RecordAll(context.Background()); err != nil {
		tb.Fatal(err)
	}
}

// sourceOf is the source Scan would give page p, or ok=false if clean.
func sourceOf(tr *Tracker, p int) (Source, bool) {
	src, dirty, _ := tr.check(p, make([]byte, PageSize), false)
	return src, dirty
}

// offsetIn returns a byte offset inside a sampled word (hit) or inside a
// word no sample covers (!hit).
func offsetIn(tb testing.TB, tr *Tracker, hit bool, r *rand.Rand) int {
	tb.Helper()
	offs := tr.SampleOffsets()
	if hit {
		return offs[r.IntN(len(offs))] + r.IntN(8)
	}
	for {
		off := r.IntN(PageSize)
		if !slices.Contains(offs, off&^7) {
			return off
		}
	}
}

func TestNew(t *testing.T) {
	for _, tc := range []struct {
		name string
		size int
		opts Options
	}{
		{"empty", 0, Options{}},
		{"partial page", PageSize + 1, Options{}},
		{"half page", PageSize / 2, Options{}},
		{"negative workers", PageSize, Options{Workers: -1}},
		{"too many samples", PageSize, Options{SampleWords: wordsPerPage + 1}},
	} {
		_, err := New(make([]byte, tc.size), tc.opts)
		if err == nil {
			t.Errorf("%s: New succeeded", tc.name)
		} else if got := err.Error(); got[:7] != "dirty: " {
			t.Errorf("%s: error %q lacks the package prefix", tc.name, got)
		}
	}
	tr := newTracker(t, make([]byte, 3*PageSize), Options{})
	if tr.Pages() != 3 {
		t.Errorf("Pages() = %d, want 3", tr.Pages())
	}
	if tr.workers < 1 {
		t.Errorf("default workers %d", tr.workers)
	}
}

func TestSampleOffsets(t *testing.T) {
	for _, tc := range []struct{ words, want int }{{0, DefaultSampleWords}, {1, 1}, {-1, 0}, {wordsPerPage, wordsPerPage}} {
		tr := newTracker(t, make([]byte, PageSize), Options{SampleWords: tc.words})
		offs := tr.SampleOffsets()
		if len(offs) != tc.want {
			t.Fatalf("SampleWords %d: %d offsets, want %d", tc.words, len(offs), tc.want)
		}
		for i, off := range offs {
			if off%8 != 0 || off < 0 || off > PageSize-8 || (i > 0 && off <= offs[i-1]) {
				t.Fatalf("SampleWords %d: bad offsets %v", tc.words, offs)
			}
		}
	}
}

func TestHashPage(t *testing.T) {
	mem := randMem(t, 1, 1)
	if got, want := HashPage(mem), xxhash.Sum64(mem); got != want {
		t.Fatalf("HashPage = %#x, want xxhash64 %#x", got, want)
	}
	mem[PageSize-1] ^= 1
	if HashPage(mem) == xxhash.Sum64(randMem(t, 1, 1)) {
		t.Fatal("hash ignores the last byte")
	}
}

func TestSourceString(t *testing.T) {
	want := []string{"engine", "background", "sample", "hash", "unrecorded"}
	for s := range NumSources {
		if got := Source(s).String(); got != want[s] {
			t.Errorf("Source(%d) = %q, want %q", s, got, want[s])
		}
	}
	if got := Source(NumSources).String(); got != "Source(5)" {
		t.Errorf("out of range: %q", got)
	}
}

func TestScanUnchanged(t *testing.T) {
	mem := randMem(t, 300, 2)
	tr := newTracker(t, mem, Options{})
	recordAll(t, tr)
	r := scan(t, tr)
	if len(r.Dirty) != 0 {
		t.Fatalf("%d dirty pages with no change: %v", len(r.Dirty), r.Dirty)
	}
	if r.PagesHashed != 300 {
		t.Fatalf("PagesHashed = %d, want every page (300)", r.PagesHashed)
	}
}

func TestScanCPUWrites(t *testing.T) {
	const pages = 512
	mem := randMem(t, pages, 3)
	tr := newTracker(t, mem, Options{Workers: 4})
	recordAll(t, tr)
	r := rand.New(rand.NewPCG(3, 3))
	var want []int
	var wantBy [NumSources]int
	wantSrc := map[int]Source{}
	for _, p := range r.Perm(pages)[:80] {
		var off int
		switch p % 3 {
		case 0:
			off = offsetIn(t, tr, true, r)
		case 1:
			off = offsetIn(t, tr, false, r)
		default:
			off = r.IntN(PageSize) // anywhere
		}
		mem[p*PageSize+off] ^= byte(1 + r.IntN(255))
		src := Hash
		if slices.Contains(tr.SampleOffsets(), off&^7) {
			src = Sample
		}
		want = append(want, p)
		wantBy[src]++
		wantSrc[p] = src
	}
	slices.Sort(want)
	res := scan(t, tr)
	if !slices.Equal(res.Dirty, want) {
		t.Fatalf("dirty %v, want %v", res.Dirty, want)
	}
	if res.BySource != wantBy {
		t.Fatalf("BySource %v, want %v", res.BySource, wantBy)
	}
	if wantBy[Sample] == 0 || wantBy[Hash] == 0 {
		t.Fatalf("test wrote no %v", wantBy)
	}
	if res.PagesHashed != pages-wantBy[Sample] {
		t.Fatalf("PagesHashed %d, want %d (sample-dirty pages skip the hash)", res.PagesHashed, pages-wantBy[Sample])
	}
	for p, src := range wantSrc {
		if got, _ := sourceOf(tr, p); got != src {
			t.Errorf("page %d: source %v, want %v", p, got, src)
		}
	}
	// Hashing in place (memory frozen) finds exactly the same.
	frozen, err := tr.ScanFrozen(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(frozen.Dirty, res.Dirty) || frozen.BySource != res.BySource || frozen.PagesHashed != res.PagesHashed {
		t.Fatalf("ScanFrozen %+v, Scan %+v", frozen, res)
	}
}

func TestScanSampleAndHash(t *testing.T) {
	mem := randMem(t, 4, 4)
	tr := newTracker(t, mem, Options{Workers: 1})
	recordAll(t, tr)
	r := rand.New(rand.NewPCG(4, 4))
	hit, miss := offsetIn(t, tr, true, r), offsetIn(t, tr, false, r)
	mem[1*PageSize+hit] ^= 0x80
	mem[2*PageSize+miss] ^= 0x01
	res := scan(t, tr)
	if !slices.Equal(res.Dirty, []int{1, 2}) {
		t.Fatalf("dirty %v, want [1 2]", res.Dirty)
	}
	if res.BySource[Sample] != 1 || res.BySource[Hash] != 1 || res.PagesHashed != 3 {
		t.Fatalf("BySource %v, hashed %d; want one sample, one hash, 3 hashed", res.BySource, res.PagesHashed)
	}
	if s, _ := sourceOf(tr, 1); s != Sample {
		t.Errorf("sampled-word write: source %v", s)
	}
	if s, _ := sourceOf(tr, 2); s != Hash {
		t.Errorf("unsampled write: source %v", s)
	}
}

func TestSamplingDisabled(t *testing.T) {
	mem := randMem(t, 2, 5)
	tr := newTracker(t, mem, Options{SampleWords: -1})
	recordAll(t, tr)
	for off := 0; off < PageSize; off += 8 {
		mem[PageSize+off] ^= 0xff
	}
	res := scan(t, tr)
	if !slices.Equal(res.Dirty, []int{1}) || res.BySource[Hash] != 1 || res.PagesHashed != 2 {
		t.Fatalf("got %+v, want page 1 by hash, 2 hashed", res)
	}
}

func TestMarkWritten(t *testing.T) {
	const pages = 200
	size := uint64(pages * PageSize)
	for _, tc := range []struct {
		name    string
		off, n  uint64
		want    []int
		comment string
	}{
		{"empty", 5 * PageSize, 0, nil, ""},
		{"one byte", 7*PageSize + 100, 1, []int{7}, ""},
		{"whole page", 9 * PageSize, PageSize, []int{9}, ""},
		{"straddles a boundary", 3*PageSize - 1, 2, []int{2, 3}, ""},
		{"several pages", 10*PageSize + 10, 3 * PageSize, []int{10, 11, 12, 13}, ""},
		{"across a bitmap word", 60*PageSize + 1, 70 * PageSize, seq(60, 131), ""},
		{"last byte", size - 1, 1, []int{pages - 1}, ""},
		{"past the end", size - PageSize, 10 * PageSize, []int{pages - 1}, ""},
		{"outside", size, PageSize, nil, ""},
		{"overflow", size - 1, ^uint64(0), []int{pages - 1}, ""},
		{"everything", 0, size, seq(0, pages), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			mem := randMem(t, pages, 6)
			tr := newTracker(t, mem, Options{Workers: 3})
			recordAll(t, tr)
			tr.MarkWritten(tc.off, tc.n)
			res := scan(t, tr)
			if !slices.Equal(res.Dirty, tc.want) {
				t.Fatalf("dirty %v, want %v", res.Dirty, tc.want)
			}
			if res.BySource[Engine] != len(tc.want) || res.PagesHashed != pages-len(tc.want) {
				t.Fatalf("BySource %v hashed %d: want %d engine pages, none hashed", res.BySource, res.PagesHashed, len(tc.want))
			}
		})
	}
}

func seq(lo, hi int) []int {
	var s []int
	for i := lo; i < hi; i++ {
		s = append(s, i)
	}
	return s
}

func TestSeveralSources(t *testing.T) {
	mem := randMem(t, 8, 7)
	tr := newTracker(t, mem, Options{Workers: 2})
	if _, err := tr.Record(seq(0, 7), nil); err != nil { // page 7 unrecorded
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(7, 7))
	hit := offsetIn(t, tr, true, r)
	// Page 1: engine and sample; page 2: engine and hash; page 3: sample;
	// page 7: engine and unrecorded.
	mem[1*PageSize+hit] ^= 1
	mem[2*PageSize+offsetIn(t, tr, false, r)] ^= 1
	mem[3*PageSize+hit] ^= 1
	tr.MarkWritten(1*PageSize, 2*PageSize)
	tr.MarkWritten(7*PageSize+5, 1)
	res := scan(t, tr)
	if !slices.Equal(res.Dirty, []int{1, 2, 3, 7}) {
		t.Fatalf("dirty %v", res.Dirty)
	}
	want := [NumSources]int{Engine: 3, Sample: 1}
	if res.BySource != want {
		t.Fatalf("BySource %v, want %v", res.BySource, want)
	}
}

func TestUnrecorded(t *testing.T) {
	mem := randMem(t, 100, 8)
	tr := newTracker(t, mem, Options{})
	res := scan(t, tr)
	if len(res.Dirty) != 100 || res.BySource[Unrecorded] != 100 || res.PagesHashed != 0 {
		t.Fatalf("fresh tracker: %d dirty, %v, hashed %d", len(res.Dirty), res.BySource, res.PagesHashed)
	}
	sent := seq(0, 100)
	sent = slices.DeleteFunc(sent, func(p int) bool { return p%10 == 4 })
	if _, err := tr.Record(sent, nil); err != nil {
		t.Fatal(err)
	}
	res = scan(t, tr)
	want := []int{4, 14, 24, 34, 44, 54, 64, 74, 84, 94}
	if !slices.Equal(res.Dirty, want) || res.BySource[Unrecorded] != len(want) {
		t.Fatalf("dirty %v (%v), want unrecorded %v", res.Dirty, res.BySource, want)
	}
}

func TestRecord(t *testing.T) {
	mem := randMem(t, 300, 9)
	tr := newTracker(t, mem, Options{Workers: 4})
	prefix := []uint64{42}
	pages := []int{3, 1, 3, 299}
	got, err := tr.Record(pages, prefix)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 5 || got[0] != 42 {
		t.Fatalf("Record did not append to dst: %v", got)
	}
	for i, p := range pages {
		if want := HashPage(mem[p*PageSize : (p+1)*PageSize]); got[i+1] != want {
			t.Errorf("hash %d (page %d) = %#x, want %#x", i, p, got[i+1], want)
		}
	}
	// Out of range: nothing recorded.
	if _, err := tr.Record([]int{0, 300}, nil); err == nil {
		t.Fatal("Record of page 300 succeeded")
	}
	if _, err := tr.Record([]int{-1}, nil); err == nil {
		t.Fatal("Record of page -1 succeeded")
	}
	if s, _ := sourceOf(tr, 0); s != Unrecorded {
		t.Fatalf("failed Record recorded page 0: %v", s)
	}

	// A large set takes the parallel path and gives the same hashes.
	all, err := tr.Record(seq(0, 300), nil)
	if err != nil {
		t.Fatal(err)
	}
	for p, h := range all {
		if h != HashPage(mem[p*PageSize:(p+1)*PageSize]) {
			t.Fatalf("parallel Record: page %d hash wrong", p)
		}
	}

	// Re-recording a changed, engine-marked page makes it clean.
	mem[7*PageSize] ^= 1
	tr.MarkWritten(7*PageSize, 1)
	if _, err := tr.Record([]int{7}, nil); err != nil {
		t.Fatal(err)
	}
	if res := scan(t, tr); len(res.Dirty) != 0 {
		t.Fatalf("dirty after re-record: %v", res.Dirty)
	}
}

func TestRecordCopy(t *testing.T) {
	mem := randMem(t, 200, 10)
	tr := newTracker(t, mem, Options{Workers: 3})
	pages := slices.Concat([]int{5}, seq(100, 200), []int{0})
	buf := make([]byte, len(pages)*PageSize)
	hs, err := tr.RecordCopy(pages, buf, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, p := range pages {
		img := buf[i*PageSize : (i+1)*PageSize]
		if !slices.Equal(img, mem[p*PageSize:(p+1)*PageSize]) || hs[i] != HashPage(img) {
			t.Fatalf("copy %d (page %d) wrong", i, p)
		}
	}
	if _, err := tr.RecordCopy(pages, buf[:len(buf)-1], nil); err == nil {
		t.Fatal("short buffer accepted")
	}
	res := scan(t, tr)
	if res.BySource[Unrecorded] != 200-len(pages) || len(res.Dirty) != 200-len(pages) {
		t.Fatalf("after RecordCopy: %v", res.BySource)
	}
}

func TestCanceled(t *testing.T) {
	tr := newTracker(t, randMem(t, 4*scanChunk, 11), Options{Workers: 1})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := tr.RecordAll(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("RecordAll: %v", err)
	}
	if _, err := tr.Scan(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("Scan: %v", err)
	}
}

func TestWorkersAgree(t *testing.T) {
	const pages = 1000 // not a multiple of the chunk sizes
	mem := randMem(t, pages, 12)
	trs := []*Tracker{
		newTracker(t, mem, Options{Workers: 1}),
		newTracker(t, mem, Options{Workers: 3}),
		newTracker(t, mem, Options{Workers: 8}),
	}
	// Same sample offsets, so sources agree too.
	for _, tr := range trs[1:] {
		tr.offsets = trs[0].offsets
	}
	r := rand.New(rand.NewPCG(12, 12))
	recorded := slices.DeleteFunc(seq(0, pages), func(int) bool { return r.IntN(20) == 0 })
	for _, tr := range trs {
		if _, err := tr.Record(recorded, nil); err != nil {
			t.Fatal(err)
		}
	}
	for range 60 {
		p := r.IntN(pages)
		mem[p*PageSize+r.IntN(PageSize)] ^= 0x10
	}
	for range 10 {
		off, n := uint64(r.IntN(pages*PageSize)), uint64(r.IntN(5*PageSize))
		for _, tr := range trs {
			tr.MarkWritten(off, n)
		}
	}
	want := scan(t, trs[0])
	if len(want.Dirty) < 60 {
		t.Fatalf("only %d dirty", len(want.Dirty))
	}
	for _, tr := range trs[1:] {
		got := scan(t, tr)
		if !slices.Equal(got.Dirty, want.Dirty) || got.BySource != want.BySource || got.PagesHashed != want.PagesHashed {
			t.Fatalf("%d workers: %v %v hashed %d; 1 worker: %v %v hashed %d", tr.workers,
				got.Dirty, got.BySource, got.PagesHashed, want.Dirty, want.BySource, want.PagesHashed)
		}
	}
}

func TestClearPagesAndReset(t *testing.T) {
	mem := randMem(t, 64, 13)
	tr := newTracker(t, mem, Options{Workers: 2})
	recordAll(t, tr)
	tr.MarkWritten(1*PageSize, 4*PageSize) // pages 1-4
	mem[10*PageSize+100] ^= 1              // page 10: content
	tr.background.set(20)                  // page 20: background, content unchanged
	tr.background.set(10)
	tr.ClearPages([]int{2, 3, 10, 20, -1, 64})
	res := scan(t, tr)
	if !slices.Equal(res.Dirty, []int{1, 4, 10}) || res.BySource[Engine] != 2 || res.BySource[Engine]+res.BySource[Background] != 2 {
		t.Fatalf("after ClearPages: %v %v", res.Dirty, res.BySource)
	}
	if s, _ := sourceOf(tr, 10); s != Sample && s != Hash {
		t.Fatalf("cleared page 10 judged by %v, want its content", s)
	}
	tr.Reset()
	res = scan(t, tr)
	if !slices.Equal(res.Dirty, []int{10}) {
		t.Fatalf("after Reset: %v", res.Dirty)
	}
}

func TestMeasureHashRate(t *testing.T) {
	mem := randMem(t, 64, 14)
	for _, w := range []int{1, 0} {
		if r := MeasureHashRate(mem, w); r <= 0 {
			t.Fatalf("workers %d: rate %v", w, r)
		}
	}
	if r := MeasureHashRate(mem[:PageSize-1], 1); r != 0 {
		t.Fatalf("short memory: rate %v", r)
	}
}
