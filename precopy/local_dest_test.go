package precopy

import (
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/internal/migtest"
)

// runsLoader records LoadLocal's calls, and DiscardLocal's and
// FreeLocal's after them.
type runsLoader struct {
	runs     []string
	discards []string
	frees    []string
	fail     error // DiscardLocal's and FreeLocal's answer
}

func (l *runsLoader) LoadLocal(pages []int, mem []byte) error {
	l.runs = append(l.runs, fmt.Sprintf("%v of %d", pages, len(mem)/dirty.PageSize))
	return nil
}

func (l *runsLoader) DiscardLocal(first, n int) error {
	l.discards = append(l.discards, fmt.Sprintf("[%d, %d) after %d loads", first, first+n, len(l.runs)))
	return l.fail
}

func (l *runsLoader) FreeLocal(first, n int) error {
	l.frees = append(l.frees, fmt.Sprintf("[%d, %d) after %d loads", first, first+n, len(l.runs)))
	return l.fail
}

// TestLocalSink: the claim notes local pages only (graphics pages and
// pages past local memory are not), passes the wrapped claim's refusal
// on, counts each page once; flush loads the noted pages from the
// receive buffer in one call, ascending, forgets them, and then frees
// their host pages lazily in one call over their span; release then gives
// that span back at once.
func TestLocalSink(t *testing.T) {
	const first, n = 100, 200
	l := &runsLoader{}
	k := &localSink{load: l, discard: l, log: migtest.Log, first: first, n: n, mem: make([]byte, n*dirty.PageSize), arrived: make([]atomic.Uint64, (n+63)/64)}
	refuse := func(p uint32) bool { return p != first+7 }
	claim := k.claim(refuse)
	for _, p := range []uint32{5, first + 3, first + 4, first + 5, first + 4, first + 64, first + 65, first + 199, first + 200} {
		if !claim(p) {
			t.Fatalf("page %d refused", p)
		}
	}
	if claim(first + 7) {
		t.Error("the wrapped claim's refusal was not passed on")
	}
	if got := k.count.Load(); got != 6 {
		t.Errorf("%d pages noted, want 6 (local, once each)", got)
	}
	save := flushPages
	flushPages = 6
	defer func() { flushPages = save }()
	if !k.due() {
		t.Error("not due at flushPages")
	}
	if err := k.flush(); err != nil {
		t.Fatal(err)
	}
	if want := []string{"[3 4 5 64 65 199] of 200"}; !slices.Equal(l.runs, want) {
		t.Errorf("loaded runs %v, want %v", l.runs, want)
	}
	if want := []string{"[3, 200) after 1 loads"}; !slices.Equal(l.frees, want) || len(l.discards) != 0 {
		t.Errorf("freed %v and discarded %v, want %v freed", l.frees, l.discards, want)
	}
	if k.count.Load() != 0 || k.due() {
		t.Error("flush left pages noted")
	}
	l.runs, l.frees = nil, nil
	if err := k.flush(); err != nil || len(l.runs) != 0 || len(l.discards) != 0 || len(l.frees) != 0 {
		t.Errorf("an empty flush loaded %v, freed %v, discarded %v (%v)", l.runs, l.frees, l.discards, err)
	}
	k.release()
	k.release()
	if want := []string{"[3, 200) after 0 loads"}; !slices.Equal(l.discards, want) {
		t.Errorf("release discarded %v, want %v (the freed span, once)", l.discards, want)
	}
	var nilSink *localSink
	if nilSink.due() || nilSink.flush() != nil || nilSink.loadNoted() != nil || nilSink.loadedPages() != 0 {
		t.Error("a nil sink is not inert")
	}
	nilSink.release()
}

// TestLocalSinkReleaseLater: the stop phase's load keeps its pages held
// until release (after the verdict, out of the downtime), which gives
// them back once; a failing discard is logged, not returned, and the
// next load starts a new list.
func TestLocalSinkReleaseLater(t *testing.T) {
	const n = 64
	l := &runsLoader{fail: errors.New("madvise said no")}
	k := &localSink{load: l, discard: l, log: migtest.Log, n: n, mem: make([]byte, n*dirty.PageSize), arrived: make([]atomic.Uint64, 1)}
	claim := k.claim(nil)
	claim(9)
	claim(40)
	if err := k.loadNoted(); err != nil {
		t.Fatal(err)
	}
	if len(l.discards) != 0 {
		t.Fatalf("loadNoted discarded %v", l.discards)
	}
	k.release()
	k.release()
	if want := []string{"[9, 41) after 1 loads"}; !slices.Equal(l.discards, want) {
		t.Errorf("discarded %v, want %v (once)", l.discards, want)
	}
	claim(3)
	if err := k.flush(); err != nil {
		t.Fatalf("a failing free failed the flush: %v", err)
	}
	if want := []string{"[3, 4) after 2 loads"}; !slices.Equal(l.frees, want) {
		t.Errorf("freed %v, want %v", l.frees, want)
	}
	// The stop phase's pages loaded after a pre-copy's flush: release
	// gives back the span of both.
	claim(60)
	if err := k.loadNoted(); err != nil {
		t.Fatal(err)
	}
	k.release()
	if want := []string{"[9, 41) after 1 loads", "[3, 61) after 3 loads"}; !slices.Equal(l.discards, want) {
		t.Errorf("discarded %v, want %v", l.discards, want)
	}
	if k.loadedPages() != 4 {
		t.Errorf("%d pages loaded, want 4", k.loadedPages())
	}
}
