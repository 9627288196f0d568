package dirty

import (
	"bytes"
	"slices"
	"testing"
)

// TestMarksExact: Marks holds exactly the pages writes touched (a range
// across a page boundary marks both, a range past the end is clipped),
// CopyClear clears before copying and copies the bytes, and a write after
// it marks the page again.
func TestMarksExact(t *testing.T) {
	const pages = 130 // three bitmap words
	mem := make([]byte, pages*PageSize)
	m := NewMarks(pages)
	m.MarkWritten(5*PageSize+4000, 200) // pages 5 and 6
	m.MarkWritten(64*PageSize, 1)       // page 64
	m.MarkWritten(129*PageSize, 10*PageSize)
	m.MarkWritten(pages*PageSize, PageSize) // outside: ignored
	if got, want := m.Marked(), []int{5, 6, 64, 129}; !slices.Equal(got, want) {
		t.Fatalf("Marked = %v, want %v", got, want)
	}
	mem[6*PageSize] = 0x77
	buf := make([]byte, 2*PageSize)
	if err := m.CopyClear([]int{6, 64}, mem, buf); err != nil {
		t.Fatal(err)
	}
	if buf[0] != 0x77 || !bytes.Equal(buf[PageSize:], mem[64*PageSize:65*PageSize]) {
		t.Error("CopyClear did not copy the pages in order")
	}
	if got, want := m.Marked(), []int{5, 129}; !slices.Equal(got, want) {
		t.Errorf("after CopyClear: %v, want %v", got, want)
	}
	m.MarkWritten(6*PageSize, 8)
	if got := m.Marked(); !slices.Contains(got, 6) {
		t.Errorf("a write after the copy is not marked: %v", got)
	}
	if err := m.CopyClear([]int{pages}, mem, buf); err == nil {
		t.Error("CopyClear of a page out of range succeeded")
	}
	if err := m.CopyClear([]int{1, 2, 3}, mem, buf); err == nil {
		t.Error("CopyClear into a short buffer succeeded")
	}
	if got := m.Marked(); !slices.Contains(got, 5) || m.Pages() != pages {
		t.Errorf("a refused CopyClear changed the marks: %v", got)
	}
}
