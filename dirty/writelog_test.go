package dirty

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
)

// fakeLog is a WriteLog the test feeds: note(p) is a guest write to page
// p, handed out by the next Written.
type fakeLog struct {
	mu    sync.Mutex
	armed int
	pages []int
	fail  error
}

func (f *fakeLog) Arm() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.armed++
	f.pages = nil
	return nil
}

func (f *fakeLog) Written(dst []int) ([]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return dst, f.fail
	}
	dst = append(dst, f.pages...)
	f.pages = nil
	return dst, nil
}

// write stores v at byte off of mem and logs the page, as the kernel
// would.
func (f *fakeLog) write(mem []byte, off int, v byte) {
	mem[off] = v
	f.mu.Lock()
	f.pages = append(f.pages, off/PageSize)
	f.mu.Unlock()
}

func newLogged(t *testing.T, pages int) ([]byte, *Tracker, *fakeLog) {
	t.Helper()
	mem := randMem(t, pages, 7)
	tr := newTracker(t, mem, Options{Workers: 2})
	wl := &fakeLog{}
	if err := tr.UseWriteLog(wl); err != nil {
		t.Fatal(err)
	}
	if wl.armed != 1 {
		t.Fatalf("UseWriteLog armed the log %d times, want 1", wl.armed)
	}
	recordAll(t, tr)
	return mem, tr, wl
}

// TestWriteLogScansOnlyWritten: with a trusted log, a scan hashes only the
// pages the log reports (the rest are not looked at), finds the changed
// ones dirty and the A→B→A one clean, and still reports engine marks.
func TestWriteLogScansOnlyWritten(t *testing.T) {
	mem, tr, wl := newLogged(t, 300)
	wl.write(mem, 3*PageSize+17, ^mem[3*PageSize+17])
	wl.write(mem, 299*PageSize+4095, ^mem[299*PageSize+4095])
	old := mem[100*PageSize]
	wl.write(mem, 100*PageSize, ^old)
	wl.write(mem, 100*PageSize, old) // A→B→A: logged, unchanged
	tr.MarkWritten(200*PageSize, 1)
	for _, frozen := range []bool{false, true} {
		var r ScanResult
		var err error
		if frozen {
			r, err = tr.ScanFrozen(context.Background())
		} else {
			r, err = tr.Scan(context.Background())
		}
		if err != nil {
			t.Fatal(err)
		}
		if !r.WriteLog.Active || r.WriteLog.Written != 3 {
			t.Fatalf("frozen %v: write log stats %+v, want active with 3 pages written", frozen, r.WriteLog)
		}
		if want := []int{3, 200, 299}; !slices.Equal(r.Dirty, want) {
			t.Fatalf("frozen %v: dirty %v, want %v", frozen, r.Dirty, want)
		}
		if r.PagesHashed > 3 {
			t.Fatalf("frozen %v: %d pages hashed; the log leaves 3 to check", frozen, r.PagesHashed)
		}
	}
}

// TestWriteLogPagesStayUntilRecorded: a page the log reported in a live
// scan that was not sent then (a round that converged) is still checked at
// the stop, though the log has nothing new; once recorded it is not.
func TestWriteLogPagesStayUntilRecorded(t *testing.T) {
	mem, tr, wl := newLogged(t, 128)
	wl.write(mem, 9*PageSize+5, ^mem[9*PageSize+5])
	if r := scan(t, tr); !slices.Equal(r.Dirty, []int{9}) {
		t.Fatalf("live scan dirty %v, want [9]", r.Dirty)
	}
	r, err := tr.ScanFrozen(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(r.Dirty, []int{9}) {
		t.Fatalf("stop scan dirty %v, want [9] (reported before, never recorded)", r.Dirty)
	}
	if _, err := tr.Record([]int{9}, nil); err != nil {
		t.Fatal(err)
	}
	if r := scan(t, tr); len(r.Dirty) != 0 || r.PagesHashed != 0 {
		t.Fatalf("after recording page 9: dirty %v, %d hashed; want none", r.Dirty, r.PagesHashed)
	}
}

// TestWriteLogStream: the streamed stop-phase scan checks only the logged
// pages too, and sends them with their hashes.
func TestWriteLogStream(t *testing.T) {
	mem, tr, wl := newLogged(t, 5000)
	for _, p := range []int{0, 63, 64, 2047, 2048, 4999} {
		wl.write(mem, p*PageSize+1, ^mem[p*PageSize+1])
	}
	var got []int
	r, err := tr.ScanFrozenStream(context.Background(), 0, func(c ScanChunk) error {
		for i, p := range c.Dirty {
			if c.Hashes[i] != HashPage(mem[int(p)*PageSize:(int(p)+1)*PageSize]) {
				t.Errorf("page %d sent with a wrong hash", p)
			}
			got = append(got, int(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{0, 63, 64, 2047, 2048, 4999}; !slices.Equal(got, want) {
		t.Fatalf("streamed dirty %v, want %v", got, want)
	}
	if r.PagesHashed != 6 || !r.WriteLog.Active {
		t.Fatalf("streamed scan hashed %d pages (log %+v), want 6 with the log active", r.PagesHashed, r.WriteLog)
	}
}

// TestWriteLogLost: a log that fails is dropped, the failure said, and
// that scan and every later one hash every page — so a change the log
// never reported is found.
func TestWriteLogLost(t *testing.T) {
	mem, tr, wl := newLogged(t, 64)
	mem[30*PageSize+8] ^= 0xff // a write the log does not report
	wl.fail = errors.New("registration gone")
	r := scan(t, tr)
	if r.WriteLog.Active || r.WriteLog.Lost == "" {
		t.Fatalf("write log stats %+v after a failure, want inactive with the reason", r.WriteLog)
	}
	// Every page is checked again: hashed, or (page 30, when the byte
	// flipped lies in a sampled word: the offsets are the tracker's
	// random choice) proven dirty by its samples without a hash.
	if checked := r.PagesHashed + r.BySource[Sample]; !slices.Equal(r.Dirty, []int{30}) || checked != 64 {
		t.Fatalf("dirty %v with %d checked (%d hashed), want [30] with all 64 checked", r.Dirty, checked, r.PagesHashed)
	}
	wl.fail = nil
	if r := scan(t, tr); r.WriteLog.Active || r.PagesHashed+r.BySource[Sample] != 64 {
		t.Fatalf("a lost log came back: %+v, %d hashed, %d by samples", r.WriteLog, r.PagesHashed, r.BySource[Sample])
	}
}

// TestWriteLogAfterRecordRefused: a log armed after pages were recorded
// could have missed writes in between.
func TestWriteLogAfterRecordRefused(t *testing.T) {
	mem := randMem(t, 8, 1)
	tr := newTracker(t, mem, Options{})
	if _, err := tr.Record([]int{2}, nil); err != nil {
		t.Fatal(err)
	}
	wl := &fakeLog{}
	if err := tr.UseWriteLog(wl); !errors.Is(err, ErrRecordedBeforeLog) || wl.armed != 0 {
		t.Fatalf("UseWriteLog after a record = %v (armed %d), want ErrRecordedBeforeLog, not armed", err, wl.armed)
	}
	if r := scan(t, tr); r.WriteLog.Active {
		t.Fatal("a refused log is active")
	}
}

// TestVerifyWriteLog: the oracle finds a change the log did not report
// and nothing when the log reported every change.
func TestVerifyWriteLog(t *testing.T) {
	mem, tr, wl := newLogged(t, 200)
	wl.write(mem, 10*PageSize, ^mem[10*PageSize])
	if _, err := tr.ScanFrozen(context.Background()); err != nil {
		t.Fatal(err)
	}
	if missed, err := tr.VerifyWriteLog(context.Background()); err != nil || len(missed) != 0 {
		t.Fatalf("VerifyWriteLog = %v, %v with every write logged; want none", missed, err)
	}
	mem[150*PageSize+3] ^= 1 // not logged
	missed, err := tr.VerifyWriteLog(context.Background())
	if err != nil || !slices.Equal(missed, []int{150}) {
		t.Fatalf("VerifyWriteLog = %v, %v; want [150], the write the log missed", missed, err)
	}
}

// peekLog is a fakeLog that can also Peek: hand out the pages without
// starting a new round (they come again on the next read).
type peekLog struct {
	fakeLog
	peeks, writtens int
}

func (f *peekLog) Peek(dst []int) ([]int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.peeks++
	return append(dst, f.pages...), nil
}

func (f *peekLog) Written(dst []int) ([]int, error) {
	f.mu.Lock()
	f.writtens++
	f.mu.Unlock()
	return f.fakeLog.Written(dst)
}

// TestFrozenScansPeek: scans of frozen memory read a log that can Peek
// with Peek (nothing to protect again), live scans with Written; the
// pages either read reports are checked all the same.
func TestFrozenScansPeek(t *testing.T) {
	mem := randMem(t, 300, 7)
	tr := newTracker(t, mem, Options{Workers: 2})
	wl := &peekLog{}
	if err := tr.UseWriteLog(wl); err != nil {
		t.Fatal(err)
	}
	recordAll(t, tr)
	wl.write(mem, 7*PageSize, ^mem[7*PageSize])
	for _, c := range []struct {
		name            string
		scan            func() ([]int, error)
		peeks, writtens int
	}{
		{"ScanFrozen", func() ([]int, error) { r, err := tr.ScanFrozen(context.Background()); return r.Dirty, err }, 1, 0},
		{"ScanFrozenStream", func() ([]int, error) {
			var got []int
			_, err := tr.ScanFrozenStream(context.Background(), 0, func(c ScanChunk) error {
				for _, p := range c.Dirty {
					got = append(got, int(p))
				}
				return nil
			})
			return got, err
		}, 2, 0},
		{"Scan", func() ([]int, error) { r, err := tr.Scan(context.Background()); return r.Dirty, err }, 2, 1},
	} {
		dirty, err := c.scan()
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(dirty, []int{7}) {
			t.Fatalf("%s: dirty %v, want [7]", c.name, dirty)
		}
		if wl.peeks != c.peeks || wl.writtens != c.writtens {
			t.Fatalf("after %s: %d peeks and %d writtens, want %d and %d", c.name, wl.peeks, wl.writtens, c.peeks, c.writtens)
		}
	}
}
