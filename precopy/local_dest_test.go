package precopy

import (
	"fmt"
	"slices"
	"sync/atomic"
	"testing"

	"github.com/gmig-dev/gmig/dirty"
)

// runsLoader records LoadLocal's calls.
type runsLoader struct{ runs []string }

func (l *runsLoader) LoadLocal(pages []int, mem []byte) error {
	l.runs = append(l.runs, fmt.Sprintf("%v of %d", pages, len(mem)/dirty.PageSize))
	return nil
}

// TestLocalSink: the claim notes local pages only (graphics pages and
// pages past local memory are not), passes the wrapped claim's refusal
// on, counts each page once; flush loads the noted pages from the
// receive buffer in one call, ascending, and forgets them.
func TestLocalSink(t *testing.T) {
	const first, n = 100, 200
	l := &runsLoader{}
	k := &localSink{load: l, first: first, n: n, mem: make([]byte, n*dirty.PageSize), arrived: make([]atomic.Uint64, (n+63)/64)}
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
	if k.count.Load() != 0 || k.due() {
		t.Error("flush left pages noted")
	}
	l.runs = nil
	if err := k.flush(); err != nil || len(l.runs) != 0 {
		t.Errorf("an empty flush loaded %v (%v)", l.runs, err)
	}
	var nilSink *localSink
	if nilSink.due() || nilSink.flush() != nil {
		t.Error("a nil sink is not inert")
	}
}
