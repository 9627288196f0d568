package precopy

import (
	"runtime/metrics"
	"time"

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
