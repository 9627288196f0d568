package precopy

import (
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

// openWriteLog opens the guest-write log Options.GuestWrites offers and
// arms it on tr before any page is recorded; it returns the log (nil if
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
