package guestwrites

import (
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

func memfd(t *testing.T, pages int) (*os.File, []byte) {
	t.Helper()
	fd, err := unix.MemfdCreate("guestwrites-test", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "guestwrites-test")
	t.Cleanup(func() { f.Close() })
	if err := f.Truncate(int64(pages) * 4096); err != nil {
		t.Fatal(err)
	}
	mem, err := unix.Mmap(fd, 0, pages*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem) })
	return f, mem
}

// TestOpenSelf: this kernel has uffd-wp, so a mapping in this process gets
// it, and it logs a write.
func TestOpenSelf(t *testing.T) {
	f, mem := memfd(t, 8)
	l, c := Open(0, f, zerolog.Nop())
	if l == nil || c.Mode != ModeUffdWP || !strings.Contains(c.String(), "this process, 1 mapping") {
		t.Fatalf("Open = %v, %q; want a uffd-wp log of this process's one mapping", l, c)
	}
	defer l.Close()
	if err := l.Arm(); err != nil {
		t.Fatal(err)
	}
	mem[5*4096+9] = 1
	if got, err := l.Written(nil); err != nil || !slices.Equal(got, []int{5}) {
		t.Fatalf("Written = %v, %v; want [5]", got, err)
	}
}

// TestOpenFallsBack: with no mapping to log, every mechanism is refused
// and the choice is the full hash, naming each reason.
func TestOpenFallsBack(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "unmapped")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	l, c := Open(0, f, zerolog.Nop())
	if l != nil || c.Mode != ModeFullHash {
		t.Fatalf("Open of an unmapped file = %v, %q; want no log, full hash", l, c)
	}
	for _, m := range []string{ModeUffdWP + ":", ModeSoftDirty + ":"} {
		if !strings.Contains(c.Detail, m) {
			t.Errorf("the choice %q does not say why %s was refused", c, m)
		}
	}
}
