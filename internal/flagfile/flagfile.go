// Package flagfile reads a daemon's configuration file into its flag set:
// one `name = value` per line naming a flag of the set, blank lines and
// lines starting with '#' ignored, surrounding spaces trimmed, the value
// taken as it stands (no quoting: a value is everything after the first
// '='). A flag given on the command line wins over the file; a repeatable
// flag (a flag.Value that appends) may appear on several lines. An unknown
// name, a line without '=' or a value the flag refuses is an error naming
// the file and the line.
package flagfile

import (
	"bufio"
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
)

// ErrSyntax is a configuration file that cannot be applied.
var ErrSyntax = errors.New("flagfile: bad configuration")

// maxLine bounds one line of a configuration file (a path or a list of
// names, never more than a few hundred bytes in practice).
const maxLine = 64 << 10

// Setting is one line of a configuration file.
type Setting struct {
	Name, Value string
	Line        int
}

// Parse reads path's settings.
func Parse(path string) ([]Setting, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("flagfile: %w", err)
	}
	defer f.Close()
	var out []Setting
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 4096), maxLine)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		name = strings.TrimSpace(name)
		if !ok || name == "" {
			return nil, fmt.Errorf("%w: %s:%d: want name = value, got %q", ErrSyntax, path, n, line)
		}
		out = append(out, Setting{Name: strings.TrimPrefix(name, "-"), Value: strings.TrimSpace(value), Line: n})
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("flagfile: reading %s: %w", path, err)
	}
	return out, nil
}

// Apply reads path and sets fs's flags from it, after fs.Parse: flags the
// command line set are left alone. skip names flags the file may not set
// (the flag that names the file itself). Every name is checked before any
// flag is set; a value a flag refuses stops Apply at its line, and the
// caller must not start (flags before that line may have been set).
func Apply(fs *flag.FlagSet, path string, skip ...string) error {
	settings, err := Parse(path)
	if err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	for _, s := range settings {
		if fs.Lookup(s.Name) == nil || slices.Contains(skip, s.Name) {
			return fmt.Errorf("%w: %s:%d: unknown setting %q", ErrSyntax, path, s.Line, s.Name)
		}
	}
	for _, s := range settings {
		if given[s.Name] {
			continue
		}
		if err := fs.Set(s.Name, s.Value); err != nil {
			return fmt.Errorf("%w: %s:%d: %s: %w", ErrSyntax, path, s.Line, s.Name, err)
		}
	}
	return nil
}
