package apilog

import (
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
)

func TestCompaction(t *testing.T) {
	l := New()
	rec := func(es ...Entry) {
		for _, e := range es {
			l.Record(e)
		}
	}
	rec(
		Entry{Kind: ConfigWrite, Offset: 0x04, Size: 2, Arg: 0x0006},     // command, early
		Entry{Kind: ConfigWrite, Offset: 0x10, Size: 4, Arg: 0xffffffff}, // BAR sizing probe
		Entry{Kind: KernelLoad, Handle: 7, Arg: 1},
		Entry{Kind: KernelLoad, Handle: 3, Arg: 2},
		Entry{Kind: Fence, Value: 1},
		Entry{Kind: KernelUnload, Handle: 7},                             // created then destroyed: leaves nothing
		Entry{Kind: ConfigWrite, Offset: 0x10, Size: 4, Arg: 0xfe000000}, // supersedes the probe
		Entry{Kind: Interrupts, Handle: 1, Arg: 3},
		Entry{Kind: KernelLoad, Handle: 9, Arg: 3},
		Entry{Kind: Fence, Value: 5},
		Entry{Kind: Interrupts, Handle: 0, Arg: 3},
		Entry{Kind: ConfigWrite, Offset: 0x3c, Size: 1, Arg: 11},
	)
	want := []Entry{
		{Kind: KernelLoad, Handle: 3, Arg: 2},
		{Kind: KernelLoad, Handle: 9, Arg: 3},
		{Kind: Fence, Value: 5},
		{Kind: Interrupts, Handle: 0, Arg: 3},
		{Kind: ConfigWrite, Offset: 0x10, Size: 4, Arg: 0xfe000000},
		{Kind: ConfigWrite, Offset: 0x3c, Size: 1, Arg: 11},
		{Kind: ConfigWrite, Offset: 0x04, Size: 2, Arg: 0x0006}, // command register last
	}
	if got := l.Compacted(); !reflect.DeepEqual(got, want) {
		t.Fatalf("compacted:\n got %+v\nwant %+v", got, want)
	}
	st := l.Stats()
	if st.RawEntries != 12 || st.CompactedEntries != 7 || st.RawBytes != 12*EntrySize || st.CompactedBytes != 7*EntrySize {
		t.Fatalf("stats %+v", st)
	}
	l.Reset()
	if got := l.Compacted(); len(got) != 3 || got[0].Kind != ConfigWrite {
		t.Fatalf("after reset: %+v (want only the config writes)", got)
	}
}

// TestLongRunStaysSmall records what a busy VM would for a long time; the
// compacted log does not grow with it.
func TestLongRunStaysSmall(t *testing.T) {
	l := New()
	for i := uint64(1); i <= 100000; i++ {
		l.Record(Entry{Kind: Fence, Value: i})
		h := uint32(i%50) + 1
		l.Record(Entry{Kind: KernelLoad, Handle: h, Arg: 1})
		l.Record(Entry{Kind: KernelUnload, Handle: h})
	}
	st := l.Stats()
	if st.RawEntries != 300000 || st.CompactedEntries != 1 {
		t.Fatalf("stats %+v", st)
	}
}

func TestEncodeDecode(t *testing.T) {
	es := []Entry{
		{Kind: KernelLoad, Handle: 3, Arg: 2},
		{Kind: Fence, Value: 1 << 40},
		{Kind: Interrupts, Handle: 1, Arg: 3},
		{Kind: ConfigWrite, Offset: 0x3c, Size: 1, Arg: 11},
		{Kind: ConfigWrite, Offset: 0x10, Size: 4, Arg: 0xfe000000},
	}
	got, err := Decode(Encode(es))
	if err != nil || !reflect.DeepEqual(got, es) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	if got, err := Decode(Encode(nil)); err != nil || len(got) != 0 {
		t.Fatalf("empty: %+v, %v", got, err)
	}
}

func TestDecodeRefuses(t *testing.T) {
	good := Encode([]Entry{{Kind: ConfigWrite, Offset: 0x10, Size: 4, Arg: 1}})
	mutate := func(i int, v byte) []byte {
		b := append([]byte(nil), good...)
		b[i] = v
		return b
	}
	cases := map[string][]byte{
		"empty":          nil,
		"truncated":      good[:len(good)-1],
		"trailing":       append(append([]byte(nil), good...), 0),
		"huge count":     {0xff, 0xff, 0xff, 0x7f},
		"unknown kind":   mutate(4, 99),
		"bad size":       mutate(5, 3),
		"past the end":   mutate(6, 0xfe),
		"misaligned":     mutate(6, 0x11),
		"stray field":    mutate(8, 1),
		"value too wide": Encode([]Entry{{Kind: ConfigWrite, Offset: 0x3c, Size: 1, Arg: 0x100}}),
		"handle zero":    Encode([]Entry{{Kind: KernelLoad, Handle: 0, Arg: 1}}),
	}
	for name, b := range cases {
		if _, err := Decode(b); !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrTooBig) {
			t.Errorf("%s: Decode = %v, want a refusal", name, err)
		}
	}
}

// recorder is a Target that records calls and can fail one.
type recorder struct {
	calls  []string
	failAt int
}

func (r *recorder) call(s string) error {
	r.calls = append(r.calls, s)
	if len(r.calls) == r.failAt {
		return errors.New("target refused")
	}
	return nil
}
func (r *recorder) LoadKernel(h, k uint32) error { return r.call(fmt.Sprintf("load %d %d", h, k)) }
func (r *recorder) SetFenceDone(v uint64) error  { return r.call(fmt.Sprintf("fence %d", v)) }
func (r *recorder) SetInterrupts(s, m uint32) error {
	return r.call(fmt.Sprintf("ints %d %d", s, m))
}
func (r *recorder) WriteConfig(o uint16, sz uint8, v uint32) error {
	return r.call(fmt.Sprintf("config %#x/%d=%#x", o, sz, v))
}

func TestReplay(t *testing.T) {
	es := []Entry{
		{Kind: KernelLoad, Handle: 3, Arg: 2},
		{Kind: Fence, Value: 9},
		{Kind: Interrupts, Handle: 1, Arg: 3},
		{Kind: ConfigWrite, Offset: 0x04, Size: 2, Arg: 6},
	}
	var r recorder
	if err := Replay(es, &r); err != nil {
		t.Fatal(err)
	}
	want := []string{"load 3 2", "fence 9", "ints 1 3", "config 0x4/2=0x6"}
	if !reflect.DeepEqual(r.calls, want) {
		t.Fatalf("calls %v", r.calls)
	}
	r = recorder{failAt: 2}
	if err := Replay(es, &r); err == nil || len(r.calls) != 2 {
		t.Fatalf("failing target: %v after %v", err, r.calls)
	}
	r = recorder{}
	bad := append(append([]Entry(nil), es...), Entry{Kind: KernelUnload, Handle: 3})
	if err := Replay(bad, &r); !errors.Is(err, ErrCorrupt) || len(r.calls) != 0 {
		t.Fatalf("malformed log: %v, applied %v", err, r.calls)
	}
}

func TestConcurrentRecord(t *testing.T) {
	l := New()
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 1000; i++ {
				l.Record(Entry{Kind: KernelLoad, Handle: uint32(g*1000 + i + 1), Arg: 1})
				_ = l.Stats()
			}
		}(g)
	}
	wg.Wait()
	if st := l.Stats(); st.RawEntries != 4000 || st.CompactedEntries != 4000 {
		t.Fatalf("stats %+v", st)
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(Encode([]Entry{{Kind: KernelLoad, Handle: 3, Arg: 2}, {Kind: Fence, Value: 9}}))
	f.Add(Encode([]Entry{{Kind: ConfigWrite, Offset: 0x10, Size: 4, Arg: 1}, {Kind: Interrupts, Handle: 1, Arg: 3}}))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		es, err := Decode(b)
		if err != nil {
			return
		}
		if got, err := Decode(Encode(es)); err != nil || !reflect.DeepEqual(got, es) {
			t.Fatalf("re-encoding a decoded log: %v", err)
		}
	})
}
