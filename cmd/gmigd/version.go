package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"
)

const versionUsage = `usage: gmigd version

Prints the module version gmigd was built as, the VCS revision (and its
time; "modified" when the tree had uncommitted changes) and the Go version.`

func cmdVersion(args []string) error {
	fs := newFlagSet("version", versionUsage)
	if _, err := parseN(fs, args); err != nil {
		return err
	}
	fmt.Println(version())
	return nil
}

// version is gmigd's build as one line, from the build information the Go
// toolchain embeds (runtime/debug.ReadBuildInfo).
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return "gmigd (no build information) " + runtime.Version()
	}
	var b strings.Builder
	fmt.Fprintf(&b, "gmigd %s", bi.Main.Version)
	if bi.Main.Version == "" {
		b.WriteString("(unknown version)")
	}
	vcs := map[string]string{}
	for _, s := range bi.Settings {
		vcs[s.Key] = s.Value
	}
	if rev := vcs["vcs.revision"]; rev != "" {
		fmt.Fprintf(&b, " revision %s", rev)
		if t := vcs["vcs.time"]; t != "" {
			fmt.Fprintf(&b, " (%s)", t)
		}
		if vcs["vcs.modified"] == "true" {
			b.WriteString(" modified")
		}
	}
	fmt.Fprintf(&b, " %s", bi.GoVersion)
	return b.String()
}
