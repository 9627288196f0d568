package precopy

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sys/unix"
)

// procCost is what this whole process had spent at one moment: the
// counters that explain a stop phase slower than its bytes (the stop
// phase's log line). Minor faults there are mostly fresh memory touched
// for the first time: buffers the Go runtime takes from pages it had
// returned to the kernel during a long pre-copy, each faulted in and
// zeroed (docs/dirty-tracking.md, "What the transfer costs").
type procCost struct {
	minorFaults int64
	user, sys   time.Duration
	gcs         uint64
}

// gcCycles is the runtime/metrics name of the count of completed GC
// cycles (read without stopping the world, unlike runtime.ReadMemStats).
const gcCycles = "/gc/cycles/total:gc-cycles"

// readProcCost reads the counters: getrusage(2) RUSAGE_SELF (a failed
// call leaves them zero) and the GC cycles.
func readProcCost() procCost {
	var ru unix.Rusage
	_ = unix.Getrusage(unix.RUSAGE_SELF, &ru)
	m := []metrics.Sample{{Name: gcCycles}}
	metrics.Read(m)
	c := procCost{
		minorFaults: ru.Minflt,
		user:        time.Duration(ru.Utime.Nano()),
		sys:         time.Duration(ru.Stime.Nano()),
	}
	if m[0].Value.Kind() == metrics.KindUint64 {
		c.gcs = m[0].Value.Uint64()
	}
	return c
}

// since is c less an earlier reading.
func (c procCost) since(b procCost) procCost {
	return procCost{c.minorFaults - b.minorFaults, c.user - b.user, c.sys - b.sys, c.gcs - b.gcs}
}

// StopProfileEnv names a directory: where it is set, each stop phase
// writes a CPU profile of this process (go tool pprof) there — the
// source's from its Stop's start to its end, the destination's from the
// stop Meta's arrival to its verdict — as SIDE-PID-NANOS.pprof, sampled
// at stopProfileHz. For finding where a stop phase's milliseconds go on a
// machine where nothing else can be run; off by default. Go's runtime
// prints one line to standard error when the rate is raised ("cannot set
// cpu profile rate until previous profile has finished"): it is harmless.
const StopProfileEnv = "GMIG_STOP_PROFILE"

// stopProfileHz is the stop phase profile's sampling rate: 100 Hz, Go's
// default, would take some 6 samples a core of a 60 ms stop phase.
const stopProfileHz = 4000

// startStopProfile starts side's stop phase profile where StopProfileEnv
// says so, and returns what ends it (a no-op otherwise, or when another
// profile runs: the log says so).
func startStopProfile(log zerolog.Logger, side string) (stop func()) {
	dir := os.Getenv(StopProfileEnv)
	if dir == "" {
		return func() {}
	}
	path := filepath.Join(dir, fmt.Sprintf("%s-%d-%d.pprof", side, os.Getpid(), time.Now().UnixNano()))
	f, err := os.Create(path)
	if err != nil {
		log.Warn().Err(err).Msg("stop phase profile not written")
		return func() {}
	}
	// Raised before StartCPUProfile, which cannot lower it (a profile
	// already running keeps its own: then both calls do nothing).
	runtime.SetCPUProfileRate(stopProfileHz)
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		os.Remove(path)
		log.Warn().Err(err).Msg("stop phase profile not written")
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			log.Warn().Err(err).Str("path", path).Msg("stop phase profile not written")
			return
		}
		log.Info().Str("path", path).Int("hz", stopProfileHz).Msg("stop phase profile written")
	}
}
