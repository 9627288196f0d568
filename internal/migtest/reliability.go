package migtest

import (
	"fmt"
	"os"
	"strings"
)

// ReliabilityEnv names the file a fault test writes its table of cells
// and outcomes to (make reliability gathers them into docs/reliability.md);
// unset, the tests write nothing.
const ReliabilityEnv = "GMIG_RELIABILITY_OUT"

// Table is one fault test's results: a title, a line on how the cells
// ran, a header and a row per cell.
type Table struct {
	Title  string
	Note   string
	Header []string
	Rows   [][]string
}

// WriteReliability writes t as markdown to the file ReliabilityEnv names,
// if it is set.
func WriteReliability(t Table) error {
	path := os.Getenv(ReliabilityEnv)
	if path == "" {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## %s\n\n", t.Title)
	if t.Note != "" {
		fmt.Fprintf(&b, "%s\n\n", t.Note)
	}
	line := func(cells []string) {
		b.WriteString("|")
		for _, c := range cells {
			c = strings.ReplaceAll(c, "|", `\|`)
			c = strings.ReplaceAll(c, "\n", " ")
			fmt.Fprintf(&b, " %s |", c)
		}
		b.WriteString("\n")
	}
	line(t.Header)
	sep := make([]string, len(t.Header))
	for i := range sep {
		sep[i] = "---"
	}
	line(sep)
	for _, r := range t.Rows {
		line(r)
	}
	b.WriteString("\n")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("migtest: writing %s: %w", ReliabilityEnv, err)
	}
	return nil
}
