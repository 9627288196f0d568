package main

import (
	"flag"

	"github.com/gmig-dev/gmig/internal/flagfile"
)

// configFlag is serve's flag naming its configuration file.
const configFlag = "config"

// registerConfig adds -config to fs.
func registerConfig(fs *flag.FlagSet) *string {
	return fs.String(configFlag, "", "read serve's flags from this file: one `name = value` per line naming a flag (without its dash), # comments; flags on the command line win (docs/operator-guide.md, \"Configuration file\")")
}

// applyConfig sets fs's flags from path (none when path is empty), after
// fs.Parse: the command line wins, unknown names are refused with their
// line.
func applyConfig(fs *flag.FlagSet, path string) error {
	if path == "" {
		return nil
	}
	return flagfile.Apply(fs, path, configFlag)
}
