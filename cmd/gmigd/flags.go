package main

import (
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/internal/bytesize"
)

// byteSize is a flag.Value for sizes such as 64M, 1G, 1GiB or 4096.
type byteSize uint64

func (b *byteSize) String() string { return strconv.FormatUint(uint64(*b), 10) }

func (b *byteSize) Set(s string) error {
	v, err := bytesize.Parse(s)
	if err != nil {
		return err
	}
	*b = byteSize(v)
	return nil
}

// newLogger returns a structured logger on stderr at level.
func newLogger(level string) (zerolog.Logger, error) {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		return zerolog.Logger{}, fmt.Errorf("bad log level %q: %w", level, err)
	}
	return zerolog.New(os.Stderr).Level(lvl).With().Timestamp().Logger(), nil
}

func init() {
	zerolog.TimeFieldFormat = time.RFC3339Nano
}
