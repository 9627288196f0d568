// Package cmdline is what gmig's commands (gmigd, gmig-bench,
// gmig-nvbench) share on their command lines: sizes as flags, the
// structured logger at a level, and where the provisioned QEMU root and
// guest image are.
package cmdline

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/internal/bytesize"
)

// ByteSize is a flag.Value for sizes such as 64M, 1G, 1GiB or 4096.
type ByteSize uint64

func (b *ByteSize) String() string { return strconv.FormatUint(uint64(*b), 10) }

// Set parses s with bytesize.Parse.
func (b *ByteSize) Set(s string) error {
	v, err := bytesize.Parse(s)
	if err != nil {
		return err
	}
	*b = ByteSize(v)
	return nil
}

// NewLogger returns a structured logger on stderr at level (zerolog's
// names: debug, info, warn, error...).
func NewLogger(level string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		return zerolog.Logger{}, fmt.Errorf("cmdline: bad log level %q: %w", level, err)
	}
	return zerolog.New(os.Stderr).Level(lvl).With().Timestamp().Logger(), nil
}

func init() {
	zerolog.TimeFieldFormat = time.RFC3339Nano
}

// DefaultCache is where `make provision` and `make guest-image` put the
// QEMU root (qemu-root/) and the guest (guest/): $GMIG_CACHE, or .cache
// beside the binary's bin/ directory when it holds a QEMU root, or .cache
// under the working directory.
func DefaultCache() string {
	if c := os.Getenv("GMIG_CACHE"); c != "" {
		return c
	}
	if exe, err := os.Executable(); err == nil {
		c := filepath.Join(filepath.Dir(filepath.Dir(exe)), ".cache")
		if _, err := os.Stat(filepath.Join(c, "qemu-root")); err == nil {
			return c
		}
	}
	return ".cache"
}
