package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/gmig-dev/gmig/internal/cmdline"
	"github.com/gmig-dev/gmig/orchestrator"
	"github.com/gmig-dev/gmig/precopy/stream"
)

// byteSize and newLogger are the commands' shared ones (internal/cmdline).
type byteSize = cmdline.ByteSize

var newLogger = cmdline.NewLogger

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

// usageError is a command line that a command refuses to act on (a flag
// it does not know, a missing or extra argument, a value that cannot be
// right): main prints the error and fs's usage on stderr and exits
// exitUsage.
type usageError struct {
	fs  *flag.FlagSet
	err error
}

func (e *usageError) Error() string { return e.err.Error() }
func (e *usageError) Unwrap() error { return e.err }

// printUsage writes the usage of the flag set a usageError carries.
func (e *usageError) printUsage(w io.Writer) {
	e.fs.SetOutput(w)
	e.fs.Usage()
}

// badUsage is a usageError for fs: the command line is refused.
func badUsage(fs *flag.FlagSet, format string, a ...any) error {
	return &usageError{fs: fs, err: fmt.Errorf(format, a...)}
}

// newFlagSet returns a flag set whose usage is synopsis (what precedes the
// flags: usage line and description) followed by its flags' defaults.
func newFlagSet(name, synopsis string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), strings.TrimRight(synopsis, "\n"))
		n := 0
		fs.VisitAll(func(*flag.Flag) { n++ })
		if n > 0 {
			fmt.Fprintln(fs.Output(), "\nflags:")
			fs.PrintDefaults()
		}
	}
	return fs
}

// runDirFlag registers -run-dir on fs, bound to dir (every command that
// talks to the daemon takes it, before or after its subcommand).
func runDirFlag(fs *flag.FlagSet, dir *string) {
	fs.StringVar(dir, "run-dir", *dir, "the daemon's run directory (its control socket is gmigd.sock there)")
}

// parseArgs parses fs's flags wherever they stand among args, as Unix
// tools do: "-f v", "-f=v", "--f v" and boolean "-b" are flags before,
// between or after the arguments, and "--" ends the flags. It returns the
// arguments before "--" and those after it (nil without "--"). -h or
// --help prints the usage on stdout and returns flag.ErrHelp; an unknown
// flag or a bad value returns a usageError. Nothing is acted on before the
// whole line is parsed.
func parseArgs(fs *flag.FlagSet, args []string) (pos, afterDash []string, err error) {
	var flags []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			afterDash = append([]string{}, args[i+1:]...)
			break
		}
		if len(a) < 2 || a[0] != '-' {
			pos = append(pos, a)
			continue
		}
		flags = append(flags, a)
		name, _, hasValue := strings.Cut(strings.TrimPrefix(a[1:], "-"), "=")
		if f := fs.Lookup(name); f != nil && !hasValue && !isBoolFlag(f) && i+1 < len(args) {
			i++
			flags = append(flags, args[i])
		}
	}
	if err := parseFlags(fs, flags); err != nil {
		return nil, nil, err
	}
	return pos, afterDash, nil
}

// parseFlags is fs.Parse(args) with -h or --help printing the usage on
// stdout (flag.ErrHelp) and any other failure a usageError.
func parseFlags(fs *flag.FlagSet, args []string) error {
	fs.SetOutput(io.Discard) // the flag package's own messages: ours follow
	switch err := fs.Parse(args); {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(os.Stdout)
		fs.Usage()
		return flag.ErrHelp
	case err != nil:
		return &usageError{fs: fs, err: err}
	}
	return nil
}

// parseN is parseArgs for a command that takes exactly the arguments
// named in want (e.g. "NAME"), those after "--" included.
func parseN(fs *flag.FlagSet, args []string, want ...string) ([]string, error) {
	pos, afterDash, err := parseArgs(fs, args)
	if err != nil {
		return nil, err
	}
	pos = append(pos, afterDash...)
	if len(pos) != len(want) {
		if len(want) == 0 {
			return nil, badUsage(fs, "unexpected arguments %q", pos)
		}
		return nil, badUsage(fs, "want %s, got %q", strings.Join(want, " "), pos)
	}
	return pos, nil
}

// isBoolFlag reports whether f takes no value (flag's boolFlag contract).
func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
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
