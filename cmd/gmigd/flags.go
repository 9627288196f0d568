package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/internal/bytesize"
	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/precopy/stream"
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

// migrationTimeouts are serve's flags for the migration conversation's
// timeouts (orchestrator.Timeouts), defaulting to the orchestrator's.
type migrationTimeouts struct{ t orchestrator.Timeouts }

func (m *migrationTimeouts) register(fs *flag.FlagSet) {
	fs.DurationVar(&m.t.Message, "message-timeout", orchestrator.DefaultMessageTimeout,
		"bound on one control exchange with the peer gmigd, the destination starting its VM included")
	fs.DurationVar(&m.t.Data, "data-timeout", orchestrator.DefaultDataTimeout,
		"destination: bound on the wait for the vGPU stream's connection after it said ready")
	fs.DurationVar(&m.t.Decision, "decision-timeout", orchestrator.DefaultDecisionTimeout,
		"bound on the source's stop phase and commit, and on the destination's wait for the source's decision (it then discards)")
	fs.DurationVar(&m.t.Resolve, "resolve-timeout", orchestrator.DefaultResolveTimeout,
		"source: how long to keep asking an unanswering destination what became of a commit before reporting the outcome unknown (the VM stays paused)")
	fs.DurationVar(&m.t.Beat, "beat-timeout", orchestrator.DefaultBeatTimeout,
		"source: wait for the guest's first heartbeat after the resume (the guest-observed downtime; the guest runs meanwhile)")
}

// timeouts returns the flags' timeouts, refusing any that is not positive.
func (m *migrationTimeouts) timeouts() (orchestrator.Timeouts, error) {
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"message", m.t.Message}, {"data", m.t.Data}, {"decision", m.t.Decision}, {"resolve", m.t.Resolve}, {"beat", m.t.Beat}} {
		if f.d <= 0 {
			return orchestrator.Timeouts{}, fmt.Errorf("-%s-timeout %v: want a positive duration", f.name, f.d)
		}
	}
	return m.t, nil
}

// streamsFlag registers -streams, the vGPU stop phase's stream count, on
// fs; what it means on each command, and what 0 means, is in usage.
// checkStreams refuses a value out of range.
func streamsFlag(fs *flag.FlagSet, usage string) *int {
	return fs.Int("streams", 0, fmt.Sprintf("%s; at most %d", usage, stream.MaxShards))
}

func checkStreams(n int) error {
	if n < 0 || n > stream.MaxShards {
		return fmt.Errorf("-streams %d: want 1 … %d, or 0 for the default", n, stream.MaxShards)
	}
	return nil
}
