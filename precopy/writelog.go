package precopy

import (
	"fmt"

	"github.com/rs/zerolog"

	"github.com/gmig-dev/gmig/abi"
	"github.com/gmig-dev/gmig/dirty"
	"github.com/gmig-dev/gmig/vgpu"
)

// Tracking lines for migrations that open no write log.
const (
	trackingStopCopy = "none (stop-and-copy sends every page)"
	trackingNoSource = "full hash (no source of guest writes for this vGPU)"
)

// ownMappingExcluder is a write log that can leave gmigd's own mapping
// of the vGPU's memory out (uffdwp.Log.Exclude): when the log is of
// gmigd itself (the in-process simulator), that mapping is the engine's,
// whose writes are marked exactly, and logging it would double every walk
// of the page tables, the stop's included.
type ownMappingExcluder interface {
	Exclude(mem []byte) (int, error)
}

// openWriteLog opens the guest-write log Options.GuestWrites offers and
// arms it on tr before any page is recorded, gmigd's own mapping of the
// memory left out where the log has one; it returns the log (nil if
// none) and the report's tracking line. A log that cannot be armed is
// closed and the line says so: the full hash covers the migration.
func openWriteLog(v *vgpu.VGPU, tr *dirty.Tracker, opts Options, log zerolog.Logger) (WriteLog, string) {
	switch {
	case opts.Strategy == StopCopy:
		return nil, trackingStopCopy
	case opts.GuestWrites == nil:
		return nil, trackingNoSource
	}
	ri, err := v.RegionInfo(abi.BARAperture)
	if err != nil {
		return nil, "full hash (the aperture's memfd: " + err.Error() + ")"
	}
	wl, line := opts.GuestWrites(ri.File)
	if wl == nil {
		return nil, line
	}
	if ex, ok := wl.(ownMappingExcluder); ok {
		n, err := ex.Exclude(v.DeviceMemory())
		if err != nil {
			closeWriteLog(wl, log)
			log.Warn().Err(err).Str("tracking", line).Msg("leaving gmigd's own mapping out of the guest-write log failed; the stop phase hashes every page")
			return nil, "full hash (leaving gmigd's own mapping out of " + line + " failed: " + err.Error() + ")"
		}
		if n > 0 {
			line += fmt.Sprintf("; %d of them gmigd's own, not logged: the engine marks its writes", n)
		}
	}
	if err := tr.UseWriteLog(wl); err != nil {
		closeWriteLog(wl, log)
		log.Warn().Err(err).Str("tracking", line).Msg("arming the guest-write log failed; the stop phase hashes every page")
		return nil, "full hash (arming " + line + " failed: " + err.Error() + ")"
	}
	return wl, line
}

// closeWriteLog closes wl if there is one; a failure is only logged (the
// migration's outcome does not depend on it).
func closeWriteLog(wl WriteLog, log zerolog.Logger) {
	if wl == nil {
		return
	}
	if err := wl.Close(); err != nil {
		log.Warn().Err(err).Msg("closing the guest-write log")
	}
}
