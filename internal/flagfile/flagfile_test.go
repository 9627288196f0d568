package flagfile

import (
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type list []string

func (l *list) String() string     { return strings.Join(*l, ",") }
func (l *list) Set(s string) error { *l = append(*l, s); return nil }

func newSet() (*flag.FlagSet, *string, *int, *list) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	name := fs.String("run-dir", "/run/default", "")
	n := fs.Int("workers", 1, "")
	var l list
	fs.Var(&l, "vgpu", "")
	fs.String("config", "", "")
	return fs, name, n, &l
}

func write(t *testing.T, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "gmigd.conf")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestApply: the file sets what the command line did not; the command
// line wins; comments and blank lines are skipped; a repeatable flag
// takes every line.
func TestApply(t *testing.T) {
	p := write(t, "# gmigd\n\nrun-dir = /run/gmig \nworkers=4\nvgpu = a:64M\nvgpu = b\n")
	fs, dir, n, l := newSet()
	if err := fs.Parse([]string{"-workers", "8"}); err != nil {
		t.Fatal(err)
	}
	if err := Apply(fs, p, "config"); err != nil {
		t.Fatal(err)
	}
	if *dir != "/run/gmig" || *n != 8 || l.String() != "a:64M,b" {
		t.Fatalf("run-dir %q workers %d vgpu %q", *dir, *n, l.String())
	}
}

// TestApplyRefuses: an unknown key, the skipped flag, a line without '='
// and a value the flag refuses are errors naming the line; an unknown key
// anywhere leaves every flag as it was.
func TestApplyRefuses(t *testing.T) {
	for _, c := range []struct{ text, want string }{
		{"run-dir = /x\npool-size = 1G\n", ":2: unknown setting \"pool-size\""},
		{"config = /etc/other\n", ":1: unknown setting \"config\""},
		{"\n\nrun-dir /x\n", ":3: want name = value"},
		{"workers = many\n", ":1: workers: "},
		{" = 3\n", ":1: want name = value"},
	} {
		fs, dir, _, _ := newSet()
		err := Apply(fs, write(t, c.text), "config")
		if !errors.Is(err, ErrSyntax) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want ErrSyntax with %q", c.text, err, c.want)
		}
		if *dir != "/run/default" {
			t.Errorf("%q: run-dir set to %q before the error", c.text, *dir)
		}
	}
	fs, _, _, _ := newSet()
	if err := Apply(fs, filepath.Join(t.TempDir(), "missing.conf")); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a missing file: %v", err)
	}
}
